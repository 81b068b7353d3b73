"""Round 27, the grader (reader C): the bubblewrap fence leaves the kernel's settings (/proc/sys)
read-only and gives the run a host name of its own; one submission's records are counted by their
values (not only their text) and kept on disk, not in the grader's memory, until judging; a complex,
bytes or date answer is judged with the live check's own sentence; `release 00 --all` is refused."""
import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import autograde
import fence
import homework
from helpers import grading
from helpers.tour import checks as tour


# ---------------------------------------------------------------- 1: /proc/sys under the fence

PROBE = r"""
import os
said = []
for name in ("kernel/domainname", "kernel/hostname", "kernel/core_pattern", "vm/drop_caches"):
    path = "/proc/sys/" + name
    try:   # opened for writing only; but domainname is written the value it holds (nothing changes)
        value = open(path).read() if name == "kernel/domainname" else ""
        descriptor = os.open(path, os.O_WRONLY)
        try:
            os.write(descriptor, value.encode()) if value else None
        finally:
            os.close(descriptor)
        said.append(name + " writable")
    except OSError:
        said.append(name + " refused")
writable = [os.path.join(top, n) for top in ("/proc", "/sys") for n in os.listdir(top)
            if not n.isdigit() and n not in ("self", "thread-self") and os.access(os.path.join(top, n), os.W_OK)]
said.append("others " + ("none" if not writable else ",".join(writable[:5])))
said.append("uts " + os.readlink("/proc/self/ns/uts"))
print("\n".join(said))
"""


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")
def test_under_bubblewrap_the_kernel_s_settings_are_read_only_and_the_host_name_is_the_run_s(tmp_path):
    """Red team C 1: as root, the run wrote /proc/sys/kernel/hostname and core_pattern (a crash handler
    run as the machine's root): bwrap's own cover of /proc/sys skips it, finding the folder r-x."""
    why = fence.fence_works(fence.BUBBLEWRAP)
    if why is not None:
        pytest.skip(f"bubblewrap does not work here: {why}")
    before = {name: Path("/proc/sys/kernel", name).read_text() for name in ("hostname", "domainname", "core_pattern")}
    folder = tmp_path / "run"
    folder.mkdir()
    done = subprocess.run(fence.fence_prefix(fence.BUBBLEWRAP, folder) + [sys.executable, "-c", PROBE], cwd=folder,
                          capture_output=True, text=True, timeout=120)
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert {k: said.get(k) for k in ("kernel/domainname", "kernel/hostname", "kernel/core_pattern", "vm/drop_caches")} \
        == dict.fromkeys(("kernel/domainname", "kernel/hostname", "kernel/core_pattern", "vm/drop_caches"),
                         "refused"), done.stdout + done.stderr
    assert said["others"] == "none"   # /proc/sysrq-trigger, /proc/irq, /sys ...
    assert said["uts"] != os.readlink("/proc/self/ns/uts")   # a host name of its own (--unshare-uts)
    assert {name: Path("/proc/sys/kernel", name).read_text() for name in before} == before


def test_both_fences_give_the_run_a_host_name_of_its_own():
    assert "--unshare-uts" in fence.bubblewrap_prefix("/x")
    assert "--uts" in fence.user_namespace_prefix("/x")
    bwrap = fence.bubblewrap_prefix("/x")
    at, ro = bwrap.index("--proc"), bwrap.index("/proc/sys") - 1   # mounted fresh, then read-only: /proc/sys first
    assert bwrap[at:at + 2] == ["--proc", "/proc"] and ro > at                  # (bwrap 0.8 leaves it writable)
    assert bwrap[ro:ro + 5] == ["--ro-bind", "/proc/sys", "/proc/sys", "--remount-ro", "/proc"]


# ---------------------------------------------------------------- 2: what the grader keeps of records

CELLS = ["c1", "c2", "c3", "c4"]


def short_texts(tmp_path):
    """A records file as the course writes it for ["ab"] * 999_999 in each of 4 check cells."""
    answer = grading.encode(["ab"] * 999_999)
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps({"cell": c, "index": 0, "check": "x", "answer": answer}) + "\n" for c in CELLS))
    return path


def test_records_of_short_texts_are_counted_by_their_values_and_the_row_says_so(tmp_path):
    """Red team C 2: 23 MB of records (short texts, uncounted) cost the grader about 221 MB per submission."""
    notes = []
    records = autograde.read_records(short_texts(tmp_path), CELLS, notes)
    assert [r["cell"] for r in records] == ["c1"]   # one answer of a million values fits; a second does not
    assert sum(autograde.values_in(json.dumps(r["answer"])) for r in records) <= autograde.MAX_RECORD_VALUES
    assert notes == [f"{cell}: {autograde.OVER_BUDGET}" for cell in ("c2", "c3", "c4")]
    assert "1,500,000 values" in autograde.OVER_BUDGET and "\n" not in autograde.OVER_BUDGET
    assert autograde.values_in('{"a": [1, "x,y", {}]}\n') >= 5   # an upper bound (a comma in a text counts too)


def test_the_grader_keeps_each_submission_s_records_on_disk_until_its_chapter_is_judged(tmp_path, fake_grader):
    path, seen = short_texts(tmp_path), {}

    def judge(chapter, records, work, hidden, fence):
        seen["type"], seen["records"] = type(records), {key: len(recs) for key, recs in records.items()}
        return {key: {cell: [] for cell in CELLS} for key in records}

    fake_grader(path.read_text(), judge)
    chapter = autograde.Chapter("00_tour", tmp_path / "x.ipynb", dict.fromkeys(CELLS, 1), {})
    subs = [autograde.Submission(name, tmp_path / f"{name}.ipynb", chapter) for name in ("ann", "bo")]
    autograde.grade_submissions(subs, tmp_path / "work", log=lambda *a: None, fence=autograde.UNFENCED)
    assert seen["type"] is autograde.OnDisk and seen["records"] == {sub.key: 1 for sub in subs}
    assert [autograde.score(sub)[0] for sub in subs] == [4, 4] and all(len(sub.notes) == 3 for sub in subs)
    gc.collect()


def test_the_judge_s_records_file_is_written_from_disk_as_from_memory(tmp_path, monkeypatch):
    """The judge's records.json, written one submission at a time, holds what json.dumps of them all held."""
    written = {}

    def run(nb, folder, grading_, files=None, **kwargs):
        written.update({name: json.loads(text.read_text() if isinstance(text, Path) else text)
                        for name, text in files.items()})
        (folder).mkdir(parents=True, exist_ok=True)
        return "ran to the end", None

    monkeypatch.setattr(autograde, "run", run)
    monkeypatch.setattr(autograde, "judge_notebook", lambda chapter: None)
    chapter = type("Chapter", (), {"stem": "00_tour"})
    records = {"ann": [{"cell": "c1", "index": 0, "answer": 1}], "bo": [{"cell": "c1", "index": 0, "answer": "x"}]}
    stored = autograde.OnDisk({key: autograde.kept_on_disk(recs, tmp_path / "kept" / f"{key}.json")
                               for key, recs in records.items()})
    autograde.judge(chapter, stored, tmp_path / "work")
    assert written == {"records.json": records}
    autograde.judge(chapter, records, tmp_path / "work2")
    assert written == {"records.json": records}
    autograde.judge(chapter, {}, tmp_path / "work3")
    assert written == {"records.json": {}}


# ---------------------------------------------------------------- 3: the live check's sentence

LOGITS = np.linspace(-1, 1, 20)


@pytest.mark.parametrize("answer", [0.05 + 0j, np.complex128(0.05), b"0.05", np.array([0.05 + 0j]),
                                    torch.tensor(0.05 + 0j), np.datetime64(1, "D"), [0.05 + 0j],
                                    np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")])],
                         ids=["complex", "np.complex128", "bytes", "complex array", "complex tensor", "datetime64",
                              "list of complex", "structured array"])
def test_an_answer_the_record_cannot_keep_is_judged_with_the_live_check_s_sentence(answer):
    """Red team C 3: the grader said "your answer could not be judged: complex" where the live check says
    "your answer should hold real numbers, but it holds complex ones"."""
    live = tour.next_prob.feedback(answer, LOGITS, 3)
    recorded = json.loads(json.dumps(grading.record_answer(tour.next_prob, answer, (LOGITS, 3), {})))
    assert live and grading.judged(tour.next_prob, recorded, (LOGITS, 3), {}) == live[:1]
    assert "could not be judged" not in live[0]


def test_a_right_answer_and_a_forged_sentence_are_judged_as_before():
    right = tour.next_prob.feedback(0.05, LOGITS, 3) == []
    recorded = json.loads(json.dumps(grading.record_answer(tour.next_prob, 0.05, (LOGITS, 3), {})))
    assert recorded == 0.05 and (grading.judged(tour.next_prob, recorded, (LOGITS, 3), {}) == []) == right
    assert grading.judged(tour.next_prob, {"said": ""}, (LOGITS, 3), {}) == ["something"]   # never right
    with pytest.raises(grading.RecordError, match="^expected a tagged record"):
        grading.decode({"said": "x", "more": 1})


# ---------------------------------------------------------------- observation: release 00 --all


def test_release_refuses_chapters_and_all_together(tmp_path, capsys):
    with pytest.raises(homework.HomeworkError, match=r"^expected either chapters to release or --all, but got "
                                                     r"both \('00' and --all\)$"):
        homework.release_step(type("Args", (), {"chapters": ["00"], "all": True, "course": tmp_path / "course"}))
    assert not (tmp_path / "course").exists()
