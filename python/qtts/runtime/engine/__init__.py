"""The engine: the one holder of the native model and its sessions (engine.py) with its lock
(engine_lock.py), what a loaded model is (context.py) and the vocoder's second session (pipeline.py)."""
