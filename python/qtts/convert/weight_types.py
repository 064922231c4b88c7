"""The weight types `qtts-cli convert --type` and `qtts-cli quantize` write, defined once and
import-free so that the CLI's parser can list them without loading gguf or numpy."""
from __future__ import annotations

WEIGHT_TYPES = ("f32", "bf16", "q8_0", "q4_k", "q5_k", "q6_k")
K_QUANT_TYPES = ("q4_k", "q5_k", "q6_k")
FILE_TYPE = {"f32": 0, "bf16": 32, "q8_0": 7, "q4_k": 15, "q5_k": 17, "q6_k": 18}  # llama.cpp's (Q4_K_M is 15)
