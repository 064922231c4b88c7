// GGUF metadata keys and tensor names of a qtts model file.
//
// This is the single C++ definition; python/qtts/names.py mirrors it for the converter and
// tests/csrc/runtime/test_names.py checks that both agree literally. Patterns take printf arguments
// (layer or table index). Tensor names stay under GGML_MAX_NAME (64) for every released shape.
#pragma once

namespace qtts::kv {

constexpr const char * ARCH_NAME = "qwen3-tts";
constexpr const char * ARCHITECTURE = "general.architecture";
constexpr const char * MODEL_NAME = "general.name";
constexpr const char * FILE_TYPE = "general.file_type";

constexpr const char * FORMAT_VERSION = "qwen3-tts.format_version";
constexpr unsigned FORMAT = 3;  // the value of FORMAT_VERSION this build reads and writes
constexpr const char * VARIANT = "qwen3-tts.variant";
constexpr const char * SIZE = "qwen3-tts.size";
constexpr const char * SOURCE = "qwen3-tts.source";

constexpr const char * TEXT_IM_START_ID = "qwen3-tts.text.im_start_id";
constexpr const char * TEXT_IM_END_ID = "qwen3-tts.text.im_end_id";
constexpr const char * TEXT_PAD_ID = "qwen3-tts.text.tts_pad_id";
constexpr const char * TEXT_BOS_ID = "qwen3-tts.text.tts_bos_id";
constexpr const char * TEXT_EOS_ID = "qwen3-tts.text.tts_eos_id";

constexpr const char * CODEC_PAD_ID = "qwen3-tts.codec.pad_id";
constexpr const char * CODEC_BOS_ID = "qwen3-tts.codec.bos_id";
constexpr const char * CODEC_EOS_ID = "qwen3-tts.codec.eos_id";
constexpr const char * CODEC_THINK_ID = "qwen3-tts.codec.think_id";
constexpr const char * CODEC_NOTHINK_ID = "qwen3-tts.codec.nothink_id";
constexpr const char * CODEC_THINK_BOS_ID = "qwen3-tts.codec.think_bos_id";
constexpr const char * CODEC_THINK_EOS_ID = "qwen3-tts.codec.think_eos_id";

constexpr const char * LANGUAGE_NAMES = "qwen3-tts.languages.names";
constexpr const char * LANGUAGE_IDS = "qwen3-tts.languages.ids";
constexpr const char * SPEAKER_NAMES = "qwen3-tts.speakers.names";
constexpr const char * SPEAKER_IDS = "qwen3-tts.speakers.ids";
constexpr const char * SPEAKER_DIALECTS = "qwen3-tts.speakers.dialects";

// Transformer hyper-parameters, repeated per network under its prefix (%s).
constexpr const char * T_EMBEDDING_LENGTH = "%s.embedding_length";
constexpr const char * T_FEED_FORWARD_LENGTH = "%s.feed_forward_length";
constexpr const char * T_BLOCK_COUNT = "%s.block_count";
constexpr const char * T_HEAD_COUNT = "%s.attention.head_count";
constexpr const char * T_HEAD_COUNT_KV = "%s.attention.head_count_kv";
constexpr const char * T_KEY_LENGTH = "%s.attention.key_length";
constexpr const char * T_NORM_EPS = "%s.attention.layer_norm_epsilon";
constexpr const char * T_ROPE_FREQ_BASE = "%s.rope.freq_base";
constexpr const char * T_CONTEXT_LENGTH = "%s.context_length";

constexpr const char * P_TALKER = "qwen3-tts.talker";
constexpr const char * P_CODE_PRED = "qwen3-tts.code_predictor";
constexpr const char * P_CODEC_DEC = "qwen3-tts.codec_decoder";
constexpr const char * P_CODEC_ENC = "qwen3-tts.codec_encoder";

constexpr const char * TALKER_TEXT_VOCAB_SIZE = "qwen3-tts.talker.text_vocab_size";
constexpr const char * TALKER_TEXT_EMBEDDING_LENGTH = "qwen3-tts.talker.text_embedding_length";
constexpr const char * TALKER_CODEC_VOCAB_SIZE = "qwen3-tts.talker.codec_vocab_size";
constexpr const char * TALKER_NUM_CODE_GROUPS = "qwen3-tts.talker.num_code_groups";
constexpr const char * TALKER_MROPE_SECTION = "qwen3-tts.talker.rope.mrope_section";
constexpr const char * CODE_PRED_VOCAB_SIZE = "qwen3-tts.code_predictor.vocab_size";

constexpr const char * SPK_EMBEDDING_LENGTH = "qwen3-tts.speaker_encoder.embedding_length";
constexpr const char * SPK_MEL_DIM = "qwen3-tts.speaker_encoder.mel_dim";
constexpr const char * SPK_CHANNELS = "qwen3-tts.speaker_encoder.channels";
constexpr const char * SPK_KERNEL_SIZES = "qwen3-tts.speaker_encoder.kernel_sizes";
constexpr const char * SPK_DILATIONS = "qwen3-tts.speaker_encoder.dilations";
constexpr const char * SPK_ATTENTION_CHANNELS = "qwen3-tts.speaker_encoder.attention_channels";
constexpr const char * SPK_RES2NET_SCALE = "qwen3-tts.speaker_encoder.res2net_scale";
constexpr const char * SPK_SE_CHANNELS = "qwen3-tts.speaker_encoder.se_channels";
constexpr const char * SPK_SAMPLE_RATE = "qwen3-tts.speaker_encoder.sample_rate";

constexpr const char * DEC_CODEBOOK_SIZE = "qwen3-tts.codec_decoder.codebook_size";
constexpr const char * DEC_CODEBOOK_DIM = "qwen3-tts.codec_decoder.codebook_dim";
constexpr const char * DEC_LATENT_DIM = "qwen3-tts.codec_decoder.latent_dim";
constexpr const char * DEC_DECODER_DIM = "qwen3-tts.codec_decoder.decoder_dim";
constexpr const char * DEC_NUM_QUANTIZERS = "qwen3-tts.codec_decoder.num_quantizers";
constexpr const char * DEC_SLIDING_WINDOW = "qwen3-tts.codec_decoder.sliding_window";
constexpr const char * DEC_UPSAMPLE_RATES = "qwen3-tts.codec_decoder.upsample_rates";
constexpr const char * DEC_UPSAMPLING_RATIOS = "qwen3-tts.codec_decoder.upsampling_ratios";
constexpr const char * DEC_SAMPLE_RATE = "qwen3-tts.codec_decoder.sample_rate";
constexpr const char * DEC_HOP_LENGTH = "qwen3-tts.codec_decoder.hop_length";

constexpr const char * ENC_NUM_FILTERS = "qwen3-tts.codec_encoder.num_filters";
constexpr const char * ENC_KERNEL_SIZE = "qwen3-tts.codec_encoder.kernel_size";
constexpr const char * ENC_LAST_KERNEL_SIZE = "qwen3-tts.codec_encoder.last_kernel_size";
constexpr const char * ENC_RESIDUAL_KERNEL_SIZE = "qwen3-tts.codec_encoder.residual_kernel_size";
constexpr const char * ENC_DILATION_GROWTH_RATE = "qwen3-tts.codec_encoder.dilation_growth_rate";
constexpr const char * ENC_COMPRESS = "qwen3-tts.codec_encoder.compress";
constexpr const char * ENC_UPSAMPLING_RATIOS = "qwen3-tts.codec_encoder.upsampling_ratios";
constexpr const char * ENC_CODEBOOK_SIZE = "qwen3-tts.codec_encoder.codebook_size";
constexpr const char * ENC_CODEBOOK_DIM = "qwen3-tts.codec_encoder.codebook_dim";
constexpr const char * ENC_NUM_QUANTIZERS = "qwen3-tts.codec_encoder.num_quantizers";
constexpr const char * ENC_SAMPLE_RATE = "qwen3-tts.codec_encoder.sample_rate";
constexpr const char * ENC_HOP_LENGTH = "qwen3-tts.codec_encoder.hop_length";

constexpr const char * GEN_DO_SAMPLE = "qwen3-tts.generation.do_sample";
constexpr const char * GEN_TEMPERATURE = "qwen3-tts.generation.temperature";
constexpr const char * GEN_TOP_K = "qwen3-tts.generation.top_k";
constexpr const char * GEN_TOP_P = "qwen3-tts.generation.top_p";
constexpr const char * GEN_REPETITION_PENALTY = "qwen3-tts.generation.repetition_penalty";
constexpr const char * GEN_SUB_DO_SAMPLE = "qwen3-tts.generation.subtalker_dosample";
constexpr const char * GEN_SUB_TEMPERATURE = "qwen3-tts.generation.subtalker_temperature";
constexpr const char * GEN_SUB_TOP_K = "qwen3-tts.generation.subtalker_top_k";
constexpr const char * GEN_SUB_TOP_P = "qwen3-tts.generation.subtalker_top_p";
constexpr const char * GEN_MAX_NEW_TOKENS = "qwen3-tts.generation.max_new_tokens";

// Qwen3-ForcedAligner files (docs/aligner.md): an architecture of their own, read by
// runtime/aligner_model; the tokenizer keys above are shared.
constexpr const char * ALIGNER_ARCH_NAME = "qwen3-forced-aligner";
constexpr const char * ALIGNER_FORMAT_VERSION = "qwen3-forced-aligner.format_version";
constexpr unsigned ALIGNER_FORMAT = 1;  // the value of ALIGNER_FORMAT_VERSION this build reads and writes
constexpr const char * ALIGNER_SOURCE = "qwen3-forced-aligner.source";
constexpr const char * ALIGNER_LANGUAGES = "qwen3-forced-aligner.languages";
constexpr const char * ALIGNER_AUDIO_START_ID = "qwen3-forced-aligner.audio_start_id";
constexpr const char * ALIGNER_AUDIO_END_ID = "qwen3-forced-aligner.audio_end_id";
constexpr const char * ALIGNER_AUDIO_PAD_ID = "qwen3-forced-aligner.audio_pad_id";
constexpr const char * ALIGNER_TIMESTAMP_ID = "qwen3-forced-aligner.timestamp_id";
constexpr const char * ALIGNER_TIMESTAMP_MS = "qwen3-forced-aligner.timestamp_segment_ms";
constexpr const char * ALIGNER_VOCAB_SIZE = "qwen3-forced-aligner.decoder.vocab_size";
constexpr const char * ALIGNER_CLASS_COUNT = "qwen3-forced-aligner.decoder.timestamp_classes";
constexpr const char * P_ALIGNER_AUDIO = "qwen3-forced-aligner.audio_encoder";
constexpr const char * P_ALIGNER_DEC = "qwen3-forced-aligner.decoder";
constexpr const char * AENC_SAMPLE_RATE = "qwen3-forced-aligner.audio_encoder.sample_rate";
constexpr const char * AENC_N_FFT = "qwen3-forced-aligner.audio_encoder.n_fft";
constexpr const char * AENC_HOP_LENGTH = "qwen3-forced-aligner.audio_encoder.hop_length";
constexpr const char * AENC_MEL_BINS = "qwen3-forced-aligner.audio_encoder.mel_bins";
constexpr const char * AENC_CONV_CHANNELS = "qwen3-forced-aligner.audio_encoder.conv_channels";
constexpr const char * AENC_OUTPUT_LENGTH = "qwen3-forced-aligner.audio_encoder.output_length";
constexpr const char * AENC_CHUNK_FRAMES = "qwen3-forced-aligner.audio_encoder.chunk_frames";
constexpr const char * AENC_WINDOW_FRAMES = "qwen3-forced-aligner.audio_encoder.window_frames";

constexpr const char * TOKENIZER_MODEL = "tokenizer.ggml.model";
constexpr const char * TOKENIZER_PRE = "tokenizer.ggml.pre";
constexpr const char * TOKENIZER_TOKENS = "tokenizer.ggml.tokens";
constexpr const char * TOKENIZER_TOKEN_TYPE = "tokenizer.ggml.token_type";
constexpr const char * TOKENIZER_MERGES = "tokenizer.ggml.merges";

}  // namespace qtts::kv

namespace qtts::tn {

// Decoder-only transformer layer (talker, code predictor, codec decoder); %s = network prefix.
constexpr const char * L_ATTN_NORM = "%s.blk.%d.attn_norm.weight";
constexpr const char * L_ATTN_NORM_B = "%s.blk.%d.attn_norm.bias";
constexpr const char * L_ATTN_Q = "%s.blk.%d.attn_q.weight";
constexpr const char * L_ATTN_K = "%s.blk.%d.attn_k.weight";
constexpr const char * L_ATTN_V = "%s.blk.%d.attn_v.weight";
constexpr const char * L_ATTN_OUT = "%s.blk.%d.attn_output.weight";
constexpr const char * L_ATTN_Q_NORM = "%s.blk.%d.attn_q_norm.weight";
constexpr const char * L_ATTN_K_NORM = "%s.blk.%d.attn_k_norm.weight";
constexpr const char * L_ATTN_SCALE = "%s.blk.%d.attn_scale";
constexpr const char * L_FFN_NORM = "%s.blk.%d.ffn_norm.weight";
constexpr const char * L_FFN_NORM_B = "%s.blk.%d.ffn_norm.bias";
constexpr const char * L_FFN_GATE = "%s.blk.%d.ffn_gate.weight";
constexpr const char * L_FFN_UP = "%s.blk.%d.ffn_up.weight";
constexpr const char * L_FFN_DOWN = "%s.blk.%d.ffn_down.weight";
constexpr const char * L_FFN_SCALE = "%s.blk.%d.ffn_scale";
// the biases of the aligner's audio encoder layers (Whisper-style linears)
constexpr const char * L_ATTN_Q_B = "%s.blk.%d.attn_q.bias";
constexpr const char * L_ATTN_K_B = "%s.blk.%d.attn_k.bias";
constexpr const char * L_ATTN_V_B = "%s.blk.%d.attn_v.bias";
constexpr const char * L_ATTN_OUT_B = "%s.blk.%d.attn_output.bias";
constexpr const char * L_FFN_UP_B = "%s.blk.%d.ffn_up.bias";
constexpr const char * L_FFN_DOWN_B = "%s.blk.%d.ffn_down.bias";

constexpr const char * TALKER = "talker";
constexpr const char * TALKER_TEXT_EMBD = "talker.text_embd.weight";
constexpr const char * TALKER_TEXT_FC1 = "talker.text_proj.fc1.weight";
constexpr const char * TALKER_TEXT_FC1_B = "talker.text_proj.fc1.bias";
constexpr const char * TALKER_TEXT_FC2 = "talker.text_proj.fc2.weight";
constexpr const char * TALKER_TEXT_FC2_B = "talker.text_proj.fc2.bias";
constexpr const char * TALKER_CODEC_EMBD = "talker.codec_embd.weight";
constexpr const char * TALKER_OUTPUT_NORM = "talker.output_norm.weight";
constexpr const char * TALKER_CODEC_HEAD = "talker.codec_head.weight";

constexpr const char * CODE_PRED = "code_pred";
constexpr const char * CODE_PRED_OUTPUT_NORM = "code_pred.output_norm.weight";
constexpr const char * CODE_PRED_CODEC_EMBD = "code_pred.codec_embd.%d.weight";
constexpr const char * CODE_PRED_LM_HEAD = "code_pred.lm_head.%d.weight";
constexpr const char * CODE_PRED_MTP_PROJ = "code_pred.mtp_proj.weight";
constexpr const char * CODE_PRED_MTP_PROJ_B = "code_pred.mtp_proj.bias";

// ECAPA-TDNN; pointwise (k=1) convolutions are stored as 2-D matrices.
constexpr const char * SPK_CONV0 = "spk_enc.blocks.0.conv.weight";
constexpr const char * SPK_CONV0_B = "spk_enc.blocks.0.conv.bias";
constexpr const char * SPK_TDNN1 = "spk_enc.blocks.%d.tdnn1.weight";
constexpr const char * SPK_TDNN1_B = "spk_enc.blocks.%d.tdnn1.bias";
constexpr const char * SPK_RES2NET = "spk_enc.blocks.%d.res2net.%d.weight";
constexpr const char * SPK_RES2NET_B = "spk_enc.blocks.%d.res2net.%d.bias";
constexpr const char * SPK_TDNN2 = "spk_enc.blocks.%d.tdnn2.weight";
constexpr const char * SPK_TDNN2_B = "spk_enc.blocks.%d.tdnn2.bias";
constexpr const char * SPK_SE1 = "spk_enc.blocks.%d.se1.weight";
constexpr const char * SPK_SE1_B = "spk_enc.blocks.%d.se1.bias";
constexpr const char * SPK_SE2 = "spk_enc.blocks.%d.se2.weight";
constexpr const char * SPK_SE2_B = "spk_enc.blocks.%d.se2.bias";
constexpr const char * SPK_MFA = "spk_enc.mfa.weight";
constexpr const char * SPK_MFA_B = "spk_enc.mfa.bias";
constexpr const char * SPK_ASP_TDNN = "spk_enc.asp.tdnn.weight";
constexpr const char * SPK_ASP_TDNN_STATS = "spk_enc.asp.tdnn_stats.weight";
constexpr const char * SPK_ASP_TDNN_B = "spk_enc.asp.tdnn.bias";
constexpr const char * SPK_ASP_CONV = "spk_enc.asp.conv.weight";
constexpr const char * SPK_ASP_CONV_B = "spk_enc.asp.conv.bias";
constexpr const char * SPK_FC = "spk_enc.fc.weight";
constexpr const char * SPK_FC_B = "spk_enc.fc.bias";

// Codec decoder. Codebooks are stored folded (embedding_sum / max(cluster_usage, 1e-5)),
// SnakeBeta as exp(alpha) and 1 / (exp(beta) + 1e-9).
constexpr const char * CODEC_DEC = "codec_dec.pre_tfm";
constexpr const char * DEC_CODEBOOK = "codec_dec.rvq.codebook.%d";
constexpr const char * DEC_RVQ_FIRST_OUT = "codec_dec.rvq_first.output_proj.weight";
constexpr const char * DEC_RVQ_REST_OUT = "codec_dec.rvq_rest.output_proj.weight";
constexpr const char * DEC_PRE_CONV = "codec_dec.pre_conv.weight";
constexpr const char * DEC_PRE_CONV_B = "codec_dec.pre_conv.bias";
constexpr const char * DEC_TFM_IN = "codec_dec.pre_tfm.input_proj.weight";
constexpr const char * DEC_TFM_IN_B = "codec_dec.pre_tfm.input_proj.bias";
constexpr const char * DEC_TFM_NORM = "codec_dec.pre_tfm.output_norm.weight";
constexpr const char * DEC_TFM_OUT = "codec_dec.pre_tfm.output_proj.weight";
constexpr const char * DEC_TFM_OUT_B = "codec_dec.pre_tfm.output_proj.bias";
constexpr const char * DEC_UP_CONV = "codec_dec.upsample.%d.conv.weight";
constexpr const char * DEC_UP_CONV_B = "codec_dec.upsample.%d.conv.bias";
constexpr const char * DEC_UP_DWCONV = "codec_dec.upsample.%d.dwconv.weight";
constexpr const char * DEC_UP_DWCONV_B = "codec_dec.upsample.%d.dwconv.bias";
constexpr const char * DEC_UP_NORM = "codec_dec.upsample.%d.norm.weight";
constexpr const char * DEC_UP_NORM_B = "codec_dec.upsample.%d.norm.bias";
constexpr const char * DEC_UP_PW1 = "codec_dec.upsample.%d.pwconv1.weight";
constexpr const char * DEC_UP_PW1_B = "codec_dec.upsample.%d.pwconv1.bias";
constexpr const char * DEC_UP_PW2 = "codec_dec.upsample.%d.pwconv2.weight";
constexpr const char * DEC_UP_PW2_B = "codec_dec.upsample.%d.pwconv2.bias";
constexpr const char * DEC_UP_GAMMA = "codec_dec.upsample.%d.gamma";
constexpr const char * DEC_VOC_IN = "codec_dec.voc.in_conv.weight";
constexpr const char * DEC_VOC_IN_B = "codec_dec.voc.in_conv.bias";
constexpr const char * DEC_VOC_SNAKE_A = "codec_dec.voc.blk.%d.snake.exp_alpha";
constexpr const char * DEC_VOC_SNAKE_B = "codec_dec.voc.blk.%d.snake.inv_beta";
constexpr const char * DEC_VOC_UP = "codec_dec.voc.blk.%d.up.weight";
constexpr const char * DEC_VOC_UP_B = "codec_dec.voc.blk.%d.up.bias";
constexpr const char * DEC_RES_SNAKE1_A = "codec_dec.voc.blk.%d.res.%d.snake1.exp_alpha";
constexpr const char * DEC_RES_SNAKE1_B = "codec_dec.voc.blk.%d.res.%d.snake1.inv_beta";
constexpr const char * DEC_RES_CONV1 = "codec_dec.voc.blk.%d.res.%d.conv1.weight";
constexpr const char * DEC_RES_CONV1_B = "codec_dec.voc.blk.%d.res.%d.conv1.bias";
constexpr const char * DEC_RES_SNAKE2_A = "codec_dec.voc.blk.%d.res.%d.snake2.exp_alpha";
constexpr const char * DEC_RES_SNAKE2_B = "codec_dec.voc.blk.%d.res.%d.snake2.inv_beta";
constexpr const char * DEC_RES_CONV2 = "codec_dec.voc.blk.%d.res.%d.conv2.weight";
constexpr const char * DEC_RES_CONV2_B = "codec_dec.voc.blk.%d.res.%d.conv2.bias";
constexpr const char * DEC_OUT_SNAKE_A = "codec_dec.voc.out_snake.exp_alpha";
constexpr const char * DEC_OUT_SNAKE_B = "codec_dec.voc.out_snake.inv_beta";
constexpr const char * DEC_OUT_CONV = "codec_dec.voc.out_conv.weight";
constexpr const char * DEC_OUT_CONV_B = "codec_dec.voc.out_conv.bias";

// Codec (Mimi) encoder. Only the codebooks the 16 valid quantizers use are kept, folded.
constexpr const char * CODEC_ENC = "codec_enc.tfm";
constexpr const char * ENC_CONV = "codec_enc.layers.%d.conv.weight";
constexpr const char * ENC_CONV_B = "codec_enc.layers.%d.conv.bias";
constexpr const char * ENC_RES_CONV1 = "codec_enc.layers.%d.res.conv1.weight";
constexpr const char * ENC_RES_CONV1_B = "codec_enc.layers.%d.res.conv1.bias";
constexpr const char * ENC_RES_CONV2 = "codec_enc.layers.%d.res.conv2.weight";
constexpr const char * ENC_RES_CONV2_B = "codec_enc.layers.%d.res.conv2.bias";
constexpr const char * ENC_DOWNSAMPLE = "codec_enc.downsample.weight";
constexpr const char * ENC_SEM_IN = "codec_enc.rvq_semantic.input_proj.weight";
constexpr const char * ENC_SEM_CODEBOOK = "codec_enc.rvq_semantic.codebook.%d";
constexpr const char * ENC_ACU_IN = "codec_enc.rvq_acoustic.input_proj.weight";
constexpr const char * ENC_ACU_CODEBOOK = "codec_enc.rvq_acoustic.codebook.%d";

// Qwen3-ForcedAligner: the audio encoder (three stride-2 Conv2d kept as torch's [out, in, 3, 3],
// their flattened output's projection, Whisper-style layers, the final norm and two projections
// into the decoder) and the Qwen3 decoder with its timestamp head.
constexpr const char * AENC = "aenc";
constexpr const char * AENC_CONV = "aenc.conv.%d.weight";
constexpr const char * AENC_CONV_B = "aenc.conv.%d.bias";
constexpr const char * AENC_CONV_OUT = "aenc.conv_out.weight";
constexpr const char * AENC_OUTPUT_NORM = "aenc.output_norm.weight";
constexpr const char * AENC_OUTPUT_NORM_B = "aenc.output_norm.bias";
constexpr const char * AENC_PROJ1 = "aenc.proj1.weight";
constexpr const char * AENC_PROJ1_B = "aenc.proj1.bias";
constexpr const char * AENC_PROJ2 = "aenc.proj2.weight";
constexpr const char * AENC_PROJ2_B = "aenc.proj2.bias";
constexpr const char * ADEC = "adec";
constexpr const char * ADEC_TOKEN_EMBD = "adec.token_embd.weight";
constexpr const char * ADEC_OUTPUT_NORM = "adec.output_norm.weight";
constexpr const char * ADEC_TIMESTAMP_HEAD = "adec.timestamp_head.weight";

}  // namespace qtts::tn
