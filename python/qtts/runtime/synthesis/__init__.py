"""From a request to audio: prompts (prompt.py), cloning (cloning.py), the request builder (request.py),
the piece assembler (assembly.py), the generation paths (speech.py, speech_text.py), chunk pacing
(pacing.py) and text that arrives in fragments (text_stream.py)."""
