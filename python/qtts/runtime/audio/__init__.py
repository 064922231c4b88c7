"""Audio and voices as values: synthesis results and files (audio.py), reference clips (refaudio.py),
the log-mel front ends (mel.py), cloned voices and their cache (voice.py)."""
