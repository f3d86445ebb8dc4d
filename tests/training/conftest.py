from tests.threads import one_torch_thread  # noqa: F401 (autouse: one torch thread for every test here)
