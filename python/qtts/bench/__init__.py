"""The benchmarks behind `qtts-cli bench` (docs/performance.md; the parser is qtts.cli.bench).

speed, memory, quality, serve, ops and batch run full-size random-weight models: built from a
released configuration with random weights (qtts.convert.randmodel, numpy only), converted with
qtts's converter and quantizer, and cached under $QTTS_CACHE/bench (common.prepare). Every
configuration that measures time or memory runs in a fresh process (`python -m qtts.bench KIND
...`, common.worker), so loading counts and the peak RSS is that configuration's. Generation runs
a fixed frame count (EOS masked) with a pinned seed. `--compare-reference` runs the official
qwen-tts on the same weights in the same invocation (needs the test extras).
"""
