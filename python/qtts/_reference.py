"""Import shim for the references, qwen-tts 0.1.1 (tests, `qtts-cli bench --compare-reference`) and
qwen-asr 0.0.6 (the forced aligner's tests), on a machine without torchaudio / sox / onnxruntime /
nagisa.

`import qwen_tts` (and any `qwen_tts.*` submodule, since the package __init__ runs first)
imports qwen_tts.core.tokenizer_25hz.vq.speech_vq, which does
    import sox, onnxruntime, torchaudio.compliance.kaldi
at module level. Those three are only *used* inside the 25Hz (V1) tokenizer's
XVectorExtractor methods, which the 12Hz models never touch.  We register empty
placeholder modules for whichever of them is not importable, BEFORE importing qwen_tts.
Any accidental use raises AttributeError immediately (nothing is silently faked).
qwen-asr's forced aligner imports nagisa (its Japanese word splitter) at module level; the other
languages never call it.
"""
import importlib.machinery
import importlib.util
import sys
import types

_STUBBED = []


def _stub(name: str) -> None:
    if name in sys.modules:
        return
    try:
        if importlib.util.find_spec(name.split(".")[0]) is not None:
            return  # real package is installed: use it
    except (ImportError, ValueError):
        pass
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        mod_name = ".".join(parts[:i])
        if mod_name not in sys.modules:
            mod = types.ModuleType(mod_name)
            mod.__doc__ = "placeholder stub (qtts._reference): not installed on this machine"
            # a spec is needed because transformers probes importlib.util.find_spec(name);
            # with no dist-info, transformers then (correctly) reports the package as unavailable.
            mod.__spec__ = importlib.machinery.ModuleSpec(mod_name, loader=None)
            sys.modules[mod_name] = mod
            _STUBBED.append(mod_name)
            if i > 1:
                setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], mod)


def install() -> list:
    """Register the placeholders; call before the first `import qwen_tts` or `import qwen_asr`."""
    for n in ("sox", "onnxruntime", "torchaudio.compliance.kaldi", "nagisa"):
        _stub(n)
    return list(_STUBBED)
