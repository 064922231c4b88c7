"""Word timestamps in bulk runs (docs/bulk.md, "Word timestamps"): `qtts-cli batch --timestamps
FORMAT --aligner MODEL` writes DIR/ID.FORMAT next to each audio file, holding the words
Model.synthesize gives the item with word_timestamps=True, in one process and in --jobs workers;
an item's own word_timestamps wins over the flag; a rerun redoes an item whose words file is
missing. The Ray runner: tests/qtts/bulk/test_bulk_ray.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import qtts
from qtts.runtime.aligner.subtitles import to_json, to_srt
from tests.fixtures.bulk import FRAMES, batch_cli, files_of, results, write_manifest

ITEMS = [
    {"id": "w1", "text": "Hello world, this is a tiny test.", "speaker": "ryan", "seed": 1, **FRAMES},
    {"id": "w2", "text": "No words for this one.", "speaker": "vivian", "seed": 2, "word_timestamps": False, **FRAMES},
    {"id": "w3", "text": "A first sentence that runs on for a while, with commas and clauses. " * 3 +
     "And a last one.", "speaker": "dylan", "seed": 3, **FRAMES},  # two pieces: the second's words offset
]


@pytest.fixture(scope="module")
def words_case(gguf_dir: Path, aligner_gguf: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("words")
    cv = gguf_dir / "tiny_custom_voice-f32.gguf"
    with qtts.load(cv, n_threads=1, aligner=aligner_gguf["f32"]) as m:
        want = {x["id"]: m.synthesize(x["text"], **{k: v for k, v in x.items() if k not in ("id", "text")},
                                      **({} if "word_timestamps" in x else {"word_timestamps": True}))
                for x in ITEMS}
    return dict(root=root, cv=cv, aligner=aligner_gguf["f32"], want=want,
                manifest=write_manifest(root / "items.jsonl", ITEMS))


def test_words_files_next_to_the_audio(words_case: dict) -> None:
    c = words_case
    out = c["root"] / "out"
    run = batch_cli(c["manifest"], "-m", c["cv"], "--output-dir", out, "-t", "1", "--timestamps", "srt",
                    "--aligner", c["aligner"], "--json", cache=c["root"] / "cache")
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in out.glob("*.srt")) == ["w1.srt", "w3.srt"]
    for ident in ("w1", "w3"):
        assert (out / f"{ident}.srt").read_text(encoding="utf-8") == to_srt(c["want"][ident].words)
    assert c["want"]["w2"].words is None and len(c["want"]["w3"].words) == 43
    assert {r["id"]: r["timestamps"] for r in results(out)} == {"w1": "w1.srt", "w2": None, "w3": "w3.srt"}
    # a words file gone: that item alone is synthesized again
    (out / "w3.srt").unlink()
    rerun = batch_cli(c["manifest"], "-m", c["cv"], "--output-dir", out, "-t", "1", "--timestamps", "srt",
                      "--aligner", c["aligner"], "--json", cache=c["root"] / "cache")
    assert rerun.returncode == 0, rerun.stderr
    assert (json.loads(rerun.stdout)["done"], json.loads(rerun.stdout)["skipped"]) == (1, 2)
    assert (out / "w3.srt").read_text(encoding="utf-8") == to_srt(c["want"]["w3"].words)


def test_workers_and_the_manifest_field(words_case: dict) -> None:
    """--jobs 2 gives the same files; without --timestamps an item that asks has a .json."""
    c = words_case
    items = [{**x, "word_timestamps": x["id"] != "w2"} for x in ITEMS]
    manifest = write_manifest(c["root"] / "asked.jsonl", items)
    out = c["root"] / "jobs"
    run = batch_cli(manifest, "-m", c["cv"], "--output-dir", out, "-t", "2", "--jobs", "2", "--aligner",
                    c["aligner"], "-q", cache=c["root"] / "cache")
    assert run.returncode == 0, run.stderr
    assert files_of(out, "json") == {i: to_json(c["want"][i].words).encode() for i in ("w1", "w3")}


def test_refusals(words_case: dict) -> None:
    c = words_case
    plain = write_manifest(c["root"] / "plain.jsonl", [{k: v for k, v in ITEMS[0].items()}])
    run = batch_cli(plain, "-m", c["cv"], "--output-dir", c["root"] / "x", "--aligner", c["aligner"],
                    cache=c["root"] / "cache")
    assert run.returncode == 1 and "--aligner times the words of --timestamps FORMAT" in run.stderr, run.stderr
    run = batch_cli(plain, "-m", c["cv"], "--output-dir", c["root"] / "x", "--timestamps", "txt",
                    cache=c["root"] / "cache")
    assert run.returncode == 2 and "invalid choice: 'txt'" in run.stderr, run.stderr
    bad = write_manifest(c["root"] / "bad.jsonl", [{**ITEMS[0], "word_timestamps": "yes"}, ITEMS[1]])
    run = batch_cli(bad, "-m", c["cv"], "--output-dir", c["root"] / "y", "--strict", cache=c["root"] / "cache")
    assert run.returncode == 1 and "line 1: word_timestamps must be True or False" in run.stderr, run.stderr
