"""Continuous batching: the Scheduler (scheduler.py), its jobs (job.py), their streamed text
(scheduler_text.py) and decode streams (scheduler_vocoder.py)."""
