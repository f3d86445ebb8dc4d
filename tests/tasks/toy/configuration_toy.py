"""Configuration of the toy model: an embedding bag that says whether a token occurs."""

from transformers import PretrainedConfig


class ToyPresenceConfig(PretrainedConfig):
    """Args: vocab_size, hidden_size (embedding width), pad_token_id; two labels (absent, present)."""

    model_type = "hf_sparse_test_toy_presence"

    def __init__(self, vocab_size: int = 16, hidden_size: int = 16, pad_token_id: int = 0, **kwargs):
        if vocab_size < 2 or hidden_size < 1:
            raise ValueError(f"vocab_size >= 2 and hidden_size >= 1 needed, got {vocab_size}, {hidden_size}")
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        kwargs.setdefault("id2label", {0: "absent", 1: "present"})
        super().__init__(pad_token_id=pad_token_id, **kwargs)


__all__ = ["ToyPresenceConfig"]
