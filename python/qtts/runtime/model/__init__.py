"""The user API: the Model facade and qtts.load (model.py), with the qwen-tts names (compat.py)."""
