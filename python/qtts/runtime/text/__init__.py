"""Text before the model: sentence-sized pieces (text.py) and the Qwen2 BPE tokenizer (tokenizer.py)."""
