"""The Vulkan lane's script (scripts/check_vulkan.sh, docs/gpu.md "The Vulkan lane"), as far as a
machine without the lane's packages can check it: CI does not run the lane (docs/developing.md),
so a renamed test file, a phase check_gpu no longer has or a broken line would otherwise surface
only at the next landing's run."""
from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check_vulkan.sh"


def _words() -> list[str]:
    text = SCRIPT.read_text(encoding="utf-8")
    return shlex.split(re.sub(r"\\\n", " ", text), comments=True)


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_its_phases_are_check_gpus() -> None:
    """Each phase the lane asks for is one check_gpu.py runs (a name it does not know would be
    skipped in silence: `--phases` only filters)."""
    words = _words()
    phases = words[words.index("--phases") + 1].split(",")
    check_gpu = (REPO / "scripts" / "check_gpu.py").read_text(encoding="utf-8")
    known = set(re.findall(r'r\.phase\(f?"([a-z_]+)', check_gpu))
    known |= {f"parity_{p}" for p in ("exact", "fast")}  # r.phase(f"parity_{prec}", ...)
    assert {"parity_exact", "parity_fast", "batch_parity_exact", "ops"} <= set(phases)
    assert set(phases) <= known, set(phases) - known


def test_its_tests_exist_and_follow_the_device_switch() -> None:
    """The lane runs these files with QTTS_TEST_DEVICE=Vulkan0: each must exist and take its
    device from the switch (tests/fixtures/device.py), or it would test the CPU twice."""
    words = _words()
    at = words.index("pytest")
    files = [w for w in words[at + 1:] if w.startswith("tests/")]
    assert files, "the lane runs no tests"
    for f in files:
        path = REPO / f
        assert path.exists(), f"{f} (named by scripts/check_vulkan.sh) does not exist"
        for test in [path] if path.is_file() else sorted(path.glob("test_*.py")):
            assert "tests.fixtures.device import" in test.read_text(encoding="utf-8"), (
                f"{test.relative_to(REPO)} runs in the Vulkan lane but ignores QTTS_TEST_DEVICE")
