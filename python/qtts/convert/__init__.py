"""The converter side: Hugging Face checkpoints to qtts GGUF files, quantization, the model registry and
file inspection."""
