"""Each generation setting (config.py) and each option (options.py) declared once, and what a
generation returns with the check of the texts it takes (generation.py)."""
