"""Convert a released Qwen3-TTS checkpoint (Hugging Face layout) into one GGUF file.

The file holds the talker, code predictor, speaker encoder (Base), codec decoder and encoder,
the text tokenizer, speaker/language tables, special ids and generation defaults.

Documented transforms (tests compare every tensor against the checkpoint through them):
* codebooks are folded: embedding_sum / max(cluster_usage, 1e-5) (the reference recomputes
  this on every call);
* SnakeBeta parameters are stored as exp(alpha) and 1 / (exp(beta) + 1e-9);
* pointwise (k=1) convolutions are stored as 2-D matrices;
* the convolutions of the codec decoder, the codec encoder and the speaker encoder are stored
  in the panel layout their conv-GEMM streams (activations are channel-fastest): a kernel
  reading k taps of `in` channels into `out` outputs becomes [out/P, k, in, P] with P = 16 when
  16 divides `out`, else P = out. Conv1d [out,in,k] is read as k taps (pointwise ones as one
  tap), ConvTranspose1d [in,out,k] as one tap into k*out outputs (tap-major); depthwise
  [C,1,k] is stored as [k,C]; the codecs' transformer linears and the decoder's ConvNeXt
  pointwise linears [out,in] are one-tap panels. The speaker encoder's SE and final layers, which see
  one frame, stay 2-D matrices, and
  its attention TDNN, whose input is [x; mean; std], is split into panels for the x part
  (asp.tdnn) and a matrix for the time-constant statistics (asp.tdnn_stats);
* tensors the 12 Hz inference never reads are dropped: the decoder quantizers' input_proj,
  the encoder quantizers' output_proj and `initialized` flags, and the Mimi acoustic
  codebooks beyond the 16 valid quantizers.
Talker and code-predictor linears are never written as F16: their activations overflow it.
The K-quant targets (q4_k, q5_k, q6_k) take their per-tensor types from `qtts.quantize`'s policy
and quantize each row chunk as it streams, so the file is byte for byte what converting to f32
and then quantizing writes, without the F32 copy on disk.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from ..runtime.text.tokenizer import tokenizer_metadata
from ..threads import resolve_threads
from . import hfconfig
from .aligner import convert_aligner, is_aligner
from .gguf_write import OutTensor, write_gguf
from .names import KV, TN
from .safetensors_io import TensorRef, open_checkpoint
from .tensors import Entry, Transform, choose_types, encode, nbytes, write_metadata
from .weight_types import FILE_TYPE, WEIGHT_TYPES


def _squeeze_k1(refs: list[np.ndarray]) -> np.ndarray:
    return refs[0].reshape(refs[0].shape[:-1])


def _panels(w: np.ndarray) -> np.ndarray:
    """[k, in, out] -> [out/P, k, in, P] (see the module docstring)."""
    k, cin, n = w.shape
    p = 16 if n % 16 == 0 else n
    return np.ascontiguousarray(w.reshape(k, cin, n // p, p).transpose(2, 0, 1, 3))


def _conv_panels(refs: list[np.ndarray]) -> np.ndarray:
    return _panels(refs[0].transpose(2, 1, 0))


def _convt_panels(refs: list[np.ndarray]) -> np.ndarray:
    cin, cout, k = refs[0].shape
    return _panels(refs[0].transpose(0, 2, 1).reshape(1, cin, k * cout))


def _linear_panels(refs: list[np.ndarray]) -> np.ndarray:
    return _panels(refs[0].T[None])


def _asp_x_panels(refs: list[np.ndarray]) -> np.ndarray:
    """The attention TDNN's input is [x; mean; std] (3 equal parts): the x columns as panels."""
    w = refs[0][:, :, 0]
    return _panels(w[:, : w.shape[1] // 3].T[None])


def _asp_stats(refs: list[np.ndarray]) -> np.ndarray:
    w = refs[0][:, :, 0]
    return np.ascontiguousarray(w[:, w.shape[1] // 3:])


def _dw_kc(refs: list[np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(refs[0][:, 0, :].T)


def _panel_shape(k: int, cin: int, n: int) -> tuple[int, ...]:
    p = 16 if n % 16 == 0 else n
    return (n // p, k, cin, p)


def _fold_codebook(refs: list[np.ndarray]) -> np.ndarray:
    embed_sum, usage = refs
    return (embed_sum / np.maximum(usage, np.float32(1e-5))[:, None]).astype(np.float32)


def _exp(refs: list[np.ndarray]) -> np.ndarray:
    return np.exp(refs[0]).astype(np.float32)


def _inv_exp(refs: list[np.ndarray]) -> np.ndarray:
    return (np.float32(1.0) / (np.exp(refs[0]) + np.float32(1e-9))).astype(np.float32)


_LAYER = {
    "self_attn.q_proj.weight": TN.L_ATTN_Q, "self_attn.k_proj.weight": TN.L_ATTN_K,
    "self_attn.v_proj.weight": TN.L_ATTN_V, "self_attn.o_proj.weight": TN.L_ATTN_OUT,
    "self_attn.q_norm.weight": TN.L_ATTN_Q_NORM, "self_attn.k_norm.weight": TN.L_ATTN_K_NORM,
    "input_layernorm.weight": TN.L_ATTN_NORM, "input_layernorm.bias": TN.L_ATTN_NORM_B,
    "post_attention_layernorm.weight": TN.L_FFN_NORM, "post_attention_layernorm.bias": TN.L_FFN_NORM_B,
    "mlp.gate_proj.weight": TN.L_FFN_GATE, "mlp.up_proj.weight": TN.L_FFN_UP,
    "mlp.down_proj.weight": TN.L_FFN_DOWN, "mlp.fc1.weight": TN.L_FFN_UP, "mlp.fc2.weight": TN.L_FFN_DOWN,
    "self_attn_layer_scale.scale": TN.L_ATTN_SCALE, "mlp_layer_scale.scale": TN.L_FFN_SCALE,
}
_LAYER_PREFIXES = (
    ("talker.model.layers.", "talker"), ("talker.code_predictor.model.layers.", "code_pred"),
    ("decoder.pre_transformer.layers.", "codec_dec.pre_tfm"),
    ("encoder.encoder_transformer.layers.", "codec_enc.tfm"),
)
_TALKER_LINEARS = ("attn_q.", "attn_k.", "attn_v.", "attn_output.", "ffn_gate.", "ffn_up.", "ffn_down.")
_PLAIN = {
    "talker.model.text_embedding.weight": (TN.TALKER_TEXT_EMBD, "text_embd"),
    "talker.model.codec_embedding.weight": (TN.TALKER_CODEC_EMBD, "codec_embd"),
    "talker.text_projection.linear_fc1.weight": (TN.TALKER_TEXT_FC1, "linear"),
    "talker.text_projection.linear_fc1.bias": (TN.TALKER_TEXT_FC1_B, "f32"),
    "talker.text_projection.linear_fc2.weight": (TN.TALKER_TEXT_FC2, "linear"),
    "talker.text_projection.linear_fc2.bias": (TN.TALKER_TEXT_FC2_B, "f32"),
    "talker.model.norm.weight": (TN.TALKER_OUTPUT_NORM, "f32"),
    "talker.codec_head.weight": (TN.TALKER_CODEC_HEAD, "linear"),
    "talker.code_predictor.model.norm.weight": (TN.CODE_PRED_OUTPUT_NORM, "f32"),
    "talker.code_predictor.small_to_mtp_projection.weight": (TN.CODE_PRED_MTP_PROJ, "linear"),
    "talker.code_predictor.small_to_mtp_projection.bias": (TN.CODE_PRED_MTP_PROJ_B, "f32"),
    "speaker_encoder.blocks.0.conv.bias": (TN.SPK_CONV0_B, "f32"),
    "decoder.pre_conv.conv.bias": (TN.DEC_PRE_CONV_B, "f32"),
    "decoder.pre_transformer.input_proj.weight": (TN.DEC_TFM_IN, "f32"),
    "decoder.pre_transformer.input_proj.bias": (TN.DEC_TFM_IN_B, "f32"),
    "decoder.pre_transformer.output_proj.weight": (TN.DEC_TFM_OUT, "f32"),
    "decoder.pre_transformer.output_proj.bias": (TN.DEC_TFM_OUT_B, "f32"),
    "decoder.pre_transformer.norm.weight": (TN.DEC_TFM_NORM, "f32"),
}
# (regex, gguf pattern, transform); groups are formatted into the pattern as integers.
_RULES: list[tuple[str, str, Transform | None]] = [
    (r"talker\.code_predictor\.model\.codec_embedding\.(\d+)\.weight", TN.CODE_PRED_CODEC_EMBD, None),
    (r"talker\.code_predictor\.lm_head\.(\d+)\.weight", TN.CODE_PRED_LM_HEAD, None),
    (r"speaker_encoder\.blocks\.0\.conv\.weight", TN.SPK_CONV0, _conv_panels),
    (r"speaker_encoder\.blocks\.(\d+)\.tdnn1\.conv\.weight", TN.SPK_TDNN1, _conv_panels),
    (r"speaker_encoder\.blocks\.(\d+)\.tdnn1\.conv\.bias", TN.SPK_TDNN1_B, None),
    (r"speaker_encoder\.blocks\.(\d+)\.tdnn2\.conv\.weight", TN.SPK_TDNN2, _conv_panels),
    (r"speaker_encoder\.blocks\.(\d+)\.tdnn2\.conv\.bias", TN.SPK_TDNN2_B, None),
    (r"speaker_encoder\.blocks\.(\d+)\.res2net_block\.blocks\.(\d+)\.conv\.weight", TN.SPK_RES2NET, _conv_panels),
    (r"speaker_encoder\.blocks\.(\d+)\.res2net_block\.blocks\.(\d+)\.conv\.bias", TN.SPK_RES2NET_B, None),
    (r"speaker_encoder\.blocks\.(\d+)\.se_block\.conv1\.weight", TN.SPK_SE1, _squeeze_k1),
    (r"speaker_encoder\.blocks\.(\d+)\.se_block\.conv1\.bias", TN.SPK_SE1_B, None),
    (r"speaker_encoder\.blocks\.(\d+)\.se_block\.conv2\.weight", TN.SPK_SE2, _squeeze_k1),
    (r"speaker_encoder\.blocks\.(\d+)\.se_block\.conv2\.bias", TN.SPK_SE2_B, None),
    (r"speaker_encoder\.mfa\.conv\.weight", TN.SPK_MFA, _conv_panels),
    (r"speaker_encoder\.mfa\.conv\.bias", TN.SPK_MFA_B, None),
    (r"speaker_encoder\.asp\.tdnn\.conv\.bias", TN.SPK_ASP_TDNN_B, None),
    (r"speaker_encoder\.asp\.conv\.weight", TN.SPK_ASP_CONV, _conv_panels),
    (r"speaker_encoder\.asp\.conv\.bias", TN.SPK_ASP_CONV_B, None),
    (r"speaker_encoder\.fc\.weight", TN.SPK_FC, _squeeze_k1),
    (r"speaker_encoder\.fc\.bias", TN.SPK_FC_B, None),
    (r"decoder\.quantizer\.rvq_first\.output_proj\.weight", TN.DEC_RVQ_FIRST_OUT, _squeeze_k1),
    (r"decoder\.quantizer\.rvq_rest\.output_proj\.weight", TN.DEC_RVQ_REST_OUT, _squeeze_k1),
    (r"decoder\.pre_conv\.conv\.weight", TN.DEC_PRE_CONV, _conv_panels),
    (r"decoder\.upsample\.(\d+)\.0\.conv\.weight", TN.DEC_UP_CONV, _convt_panels),
    (r"decoder\.upsample\.(\d+)\.0\.conv\.bias", TN.DEC_UP_CONV_B, None),
    (r"decoder\.upsample\.(\d+)\.1\.dwconv\.conv\.weight", TN.DEC_UP_DWCONV, _dw_kc),
    (r"decoder\.upsample\.(\d+)\.1\.dwconv\.conv\.bias", TN.DEC_UP_DWCONV_B, None),
    (r"decoder\.upsample\.(\d+)\.1\.norm\.weight", TN.DEC_UP_NORM, None),
    (r"decoder\.upsample\.(\d+)\.1\.norm\.bias", TN.DEC_UP_NORM_B, None),
    (r"decoder\.upsample\.(\d+)\.1\.pwconv1\.weight", TN.DEC_UP_PW1, _linear_panels),
    (r"decoder\.upsample\.(\d+)\.1\.pwconv1\.bias", TN.DEC_UP_PW1_B, None),
    (r"decoder\.upsample\.(\d+)\.1\.pwconv2\.weight", TN.DEC_UP_PW2, _linear_panels),
    (r"decoder\.upsample\.(\d+)\.1\.pwconv2\.bias", TN.DEC_UP_PW2_B, None),
    (r"decoder\.upsample\.(\d+)\.1\.gamma", TN.DEC_UP_GAMMA, None),
    (r"encoder\.encoder\.layers\.(\d+)\.conv\.weight", TN.ENC_CONV, _conv_panels),
    (r"encoder\.encoder\.layers\.(\d+)\.conv\.bias", TN.ENC_CONV_B, None),
    (r"encoder\.encoder\.layers\.(\d+)\.block\.1\.conv\.weight", TN.ENC_RES_CONV1, _conv_panels),
    (r"encoder\.encoder\.layers\.(\d+)\.block\.1\.conv\.bias", TN.ENC_RES_CONV1_B, None),
    (r"encoder\.encoder\.layers\.(\d+)\.block\.3\.conv\.weight", TN.ENC_RES_CONV2, _conv_panels),
    (r"encoder\.encoder\.layers\.(\d+)\.block\.3\.conv\.bias", TN.ENC_RES_CONV2_B, None),
    (r"encoder\.downsample\.conv\.weight", TN.ENC_DOWNSAMPLE, _conv_panels),
    (r"encoder\.quantizer\.semantic_residual_vector_quantizer\.input_proj\.weight", TN.ENC_SEM_IN, _squeeze_k1),
    (r"encoder\.quantizer\.acoustic_residual_vector_quantizer\.input_proj\.weight", TN.ENC_ACU_IN, _squeeze_k1),
]
_DROPPED = re.compile(
    r"decoder\.quantizer\.rvq_(first|rest)\.input_proj\.weight"
    r"|encoder\.quantizer\.\w+_residual_vector_quantizer\.output_proj\.weight"
    r"|encoder\.quantizer\.\w+_residual_vector_quantizer\.layers\.\d+\.codebook\.initialized")


def _new_shape(ref: TensorRef, fn: Transform | None) -> tuple[int, ...]:
    if fn is _squeeze_k1:
        if ref.shape[-1] != 1:
            raise ValueError(f"{ref.file}: tensor {ref.name!r} has shape {ref.shape}, expected a k=1 conv")
        return ref.shape[:-1]
    if fn is _dw_kc:
        if len(ref.shape) != 3 or ref.shape[1] != 1:
            raise ValueError(f"{ref.file}: tensor {ref.name!r} has shape {ref.shape}, expected [C,1,k]")
        return (ref.shape[2], ref.shape[0])
    if fn is _linear_panels:
        out, cin = ref.shape
        return _panel_shape(1, cin, out)
    if fn in (_conv_panels, _convt_panels):
        if len(ref.shape) != 3:
            raise ValueError(f"{ref.file}: tensor {ref.name!r} has shape {ref.shape}, expected a 1-D conv kernel")
        a, b, k = ref.shape
        return _panel_shape(k, b, a) if fn is _conv_panels else _panel_shape(1, a, k * b)
    return ref.shape


def plan(ck: hfconfig.Checkpoint, model: dict[str, TensorRef], codec: dict[str, TensorRef]) -> list[Entry]:
    """Map every checkpoint tensor to its GGUF entry; unknown tensors are an error."""
    entries: list[Entry] = []
    n_voc = len(ck.codec["decoder_config"]["upsample_rates"])
    n_acoustic = int(ck.codec["encoder_valid_num_quantizers"]) - 1
    codebooks: dict[str, dict[str, TensorRef]] = {}
    for name, ref in {**model, **codec}.items():
        if ck.variant != "base" and name.startswith("speaker_encoder."):
            raise ValueError(f"{ref.file}: {ck.variant} checkpoint carries a speaker encoder tensor {name!r}")
        if _DROPPED.fullmatch(name):
            continue
        if name == "speaker_encoder.asp.tdnn.conv.weight":
            out, cin, _ = ref.shape
            entries.append(Entry(TN.SPK_ASP_TDNN, [ref], _panel_shape(1, cin // 3, out), "f32", _asp_x_panels))
            entries.append(Entry(TN.SPK_ASP_TDNN_STATS, [ref], (out, cin - cin // 3), "f32", _asp_stats))
            continue
        if name in _PLAIN:
            gname, role = _PLAIN[name]
            entries.append(Entry(gname, [ref], ref.shape, role))
            continue
        m = re.fullmatch(r"(decoder\.quantizer\.rvq_(first|rest)\.vq|encoder\.quantizer\.(semantic|acoustic)"
                         r"_residual_vector_quantizer)\.layers\.(\d+)\.(_codebook|codebook)\."
                         r"(embedding_sum|embed_sum|cluster_usage)", name)
        if m:
            i = int(m.group(4))
            if m.group(2) == "first":
                gname = TN.DEC_CODEBOOK % i
            elif m.group(2) == "rest":
                gname = TN.DEC_CODEBOOK % (i + 1)
            elif m.group(3) == "semantic":
                gname = TN.ENC_SEM_CODEBOOK % i
            elif i < n_acoustic:
                gname = TN.ENC_ACU_CODEBOOK % i
            else:
                continue
            codebooks.setdefault(gname, {})["usage" if m.group(6) == "cluster_usage" else "sum"] = ref
            continue
        entry = _match_layer(name, ref) or _match_vocoder(name, ref, n_voc) or _match_rule(name, ref)
        if entry is None:
            raise ValueError(f"{ref.file}: unexpected tensor {name!r} (not part of the Qwen3-TTS 12 Hz layout)")
        entries.append(entry)
    for gname, parts in sorted(codebooks.items()):
        if set(parts) != {"sum", "usage"}:
            raise ValueError(f"codebook for {gname!r} is incomplete: needs embedding sum and cluster usage")
        entries.append(Entry(gname, [parts["sum"], parts["usage"]], parts["sum"].shape, "f32", _fold_codebook))
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ValueError("two checkpoint tensors map to the same GGUF name")
    return entries


def _match_layer(name: str, ref: TensorRef) -> Entry | None:
    for hf_prefix, net in _LAYER_PREFIXES:
        if name.startswith(hf_prefix):
            idx, _, rest = name[len(hf_prefix):].partition(".")
            if idx.isdigit() and rest in _LAYER:
                gname = _LAYER[rest] % (net, int(idx))
                is_linear = gname.split(".")[-2] + "." in _TALKER_LINEARS
                if net in ("codec_enc.tfm", "codec_dec.pre_tfm") and is_linear:  # run as conv-GEMMs
                    out, cin = ref.shape
                    return Entry(gname, [ref], _panel_shape(1, cin, out), "f32", _linear_panels)
                kind = "linear" if is_linear and net in ("talker", "code_pred") else "f32"
                return Entry(gname, [ref], ref.shape, kind)
    return None


def _match_vocoder(name: str, ref: TensorRef, n_voc: int) -> Entry | None:
    m = re.fullmatch(r"decoder\.decoder\.(\d+)\.(.+)", name)
    if not m:
        return None
    k, rest = int(m.group(1)), m.group(2)
    snake = {"alpha": _exp, "beta": _inv_exp}
    if k == 0 and rest == "conv.weight":
        return Entry(TN.DEC_VOC_IN, [ref], _new_shape(ref, _conv_panels), "f32", _conv_panels)
    if k == 0 and rest == "conv.bias":
        return Entry(TN.DEC_VOC_IN_B, [ref], ref.shape, "f32")
    if k == n_voc + 1 and rest in snake:
        return Entry(TN.DEC_OUT_SNAKE_A if rest == "alpha" else TN.DEC_OUT_SNAKE_B, [ref], ref.shape, "f32",
                     snake[rest])
    if k == n_voc + 2 and rest == "conv.weight":
        return Entry(TN.DEC_OUT_CONV, [ref], _new_shape(ref, _conv_panels), "f32", _conv_panels)
    if k == n_voc + 2 and rest == "conv.bias":
        return Entry(TN.DEC_OUT_CONV_B, [ref], ref.shape, "f32")
    if not 1 <= k <= n_voc:
        return None
    b = k - 1
    if rest in ("block.0.alpha", "block.0.beta"):
        pat = TN.DEC_VOC_SNAKE_A if rest.endswith("alpha") else TN.DEC_VOC_SNAKE_B
        return Entry(pat % b, [ref], ref.shape, "f32", snake[rest.rsplit(".", 1)[1]])
    if rest == "block.1.conv.weight":
        return Entry(TN.DEC_VOC_UP % b, [ref], _new_shape(ref, _convt_panels), "f32", _convt_panels)
    if rest == "block.1.conv.bias":
        return Entry(TN.DEC_VOC_UP_B % b, [ref], ref.shape, "f32")
    m = re.fullmatch(r"block\.(\d+)\.(act1|act2|conv1\.conv|conv2\.conv)\.(alpha|beta|weight|bias)", rest)
    if not m or not 2 <= int(m.group(1)) <= 4:
        return None
    r, part, leaf = int(m.group(1)) - 2, m.group(2), m.group(3)
    table = {("act1", "alpha"): TN.DEC_RES_SNAKE1_A, ("act1", "beta"): TN.DEC_RES_SNAKE1_B,
             ("act2", "alpha"): TN.DEC_RES_SNAKE2_A, ("act2", "beta"): TN.DEC_RES_SNAKE2_B,
             ("conv1.conv", "weight"): TN.DEC_RES_CONV1, ("conv1.conv", "bias"): TN.DEC_RES_CONV1_B,
             ("conv2.conv", "weight"): TN.DEC_RES_CONV2, ("conv2.conv", "bias"): TN.DEC_RES_CONV2_B}
    if (part, leaf) not in table:
        return None
    convs = {("conv1.conv", "weight"): _conv_panels, ("conv2.conv", "weight"): _conv_panels}
    fn = snake.get(leaf) or convs.get((part, leaf))
    return Entry(table[(part, leaf)] % (b, r), [ref], _new_shape(ref, fn), "f32", fn)


def _match_rule(name: str, ref: TensorRef) -> Entry | None:
    for pattern, gname, fn in _RULES:
        m = re.fullmatch(pattern, name)
        if m:
            args = tuple(int(g) for g in m.groups())
            full = gname % args if args else gname
            role = "f32"
            if full.startswith("code_pred.lm_head."):
                role = "linear"
            elif full.startswith("code_pred.codec_embd."):
                role = "codec_embd"
            return Entry(full, [ref], _new_shape(ref, fn), role, fn)
    return None


def convert(hf_dir: str | os.PathLike, out_path: str | os.PathLike, out_type: str = "f32",
            name: str | None = None, log: Callable[[str], None] | None = None,
            n_threads: int | None = None) -> Path:
    """Write `out_path` atomically (a partial file never remains); returns its path.
    `n_threads` quantizes the K-quant targets (default: the physical cores). A Qwen3-ForcedAligner
    checkpoint becomes an aligner file (convert/aligner.py)."""
    if is_aligner(hf_dir):
        return convert_aligner(hf_dir, out_path, out_type, name=name, log=log, n_threads=n_threads)
    if out_type not in WEIGHT_TYPES:
        raise ValueError(f"unknown --type {out_type!r}; choose one of {', '.join(WEIGHT_TYPES)}")
    threads = resolve_threads(n_threads)
    hf = Path(hf_dir)
    ck = hfconfig.read_checkpoint(hf)
    meta = hfconfig.metadata(ck)
    tok = tokenizer_metadata(hf)
    entries = plan(ck, open_checkpoint(hf), open_checkpoint(hf / "speech_tokenizer"))
    choose_types(entries, out_type)


    def add_metadata(writer: GGUFWriter) -> None:
        writer.add_string(KV.MODEL_NAME, name or hf.resolve().name)
        writer.add_uint32(KV.FILE_TYPE, FILE_TYPE[out_type])
        writer.add_string(KV.SOURCE, hf.resolve().name)
        write_metadata(writer, meta)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("qwen2")
        writer.add_token_list(tok.tokens)
        writer.add_token_types(tok.token_types)
        writer.add_token_merges(tok.merges)

    tensors = [OutTensor(e.name, e.shape, e.qtype, nbytes(e), lambda e=e: encode(e, threads)) for e in entries]
    return write_gguf(out_path, add_metadata, tensors, log)
