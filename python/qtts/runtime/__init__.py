"""The runtime: a loaded model, its engine, prompts, synthesis, voices and audio."""
