"""Word timestamps: the Aligner (aligner.py), the one holder of its native handles (aligner_engine.py),
its words (words.py) and subtitle files (subtitles.py)."""
