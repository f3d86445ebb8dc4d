"""The toy inference pipeline: ``pipe("t1 t7 t3")`` -> ``{"label": "present", "score": 0.98}``."""

from transformers import Pipeline


class ToyPresencePipeline(Pipeline):
    def _sanitize_parameters(self, **kwargs):
        return {}, {}, {}

    def preprocess(self, text):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"input must be a non-empty string of tokens, got {text!r}")
        return self.tokenizer(text, return_tensors="pt")

    def _forward(self, inputs):
        return self.model(**inputs)

    def postprocess(self, outputs):
        probs = outputs.logits[0].softmax(-1)
        label = int(probs.argmax())
        return {"label": self.model.config.id2label[label], "score": float(probs[label])}


__all__ = ["ToyPresencePipeline"]
