"""Round 29 (issue 31), reader C: `homework.py grade ""` (an unset $SUBMISSIONS, say) graded the current folder,
the repository's own notebooks as students; it is refused in one sentence now, before anything runs. And
`homework.py exercises` gave ch03_ex3 a line that only mentions exercises 1 and 2 as its prompt."""
import pytest

import homework
from execute_notebooks import INSTRUCTOR


@pytest.mark.parametrize("given", ["", "  "])
def test_an_empty_submissions_path_is_refused(given, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "00_tour.ipynb").write_text("{}")   # (something the current folder would offer)
    assert homework.main(["--course", str(tmp_path / "course"), "grade", given]) == 1
    said = capsys.readouterr().err
    assert said.startswith("✗ expected a folder of submissions") and "empty path" in said and "\n" == said[-1], said
    assert said.count("\n") == 1 and not (tmp_path / "course" / "scores.csv").exists()


def test_an_exercise_is_listed_with_its_heading_not_a_line_that_mentions_others():
    listed = {grade_id: prompt for grade_id, _, prompt in homework.exercises(INSTRUCTOR / "03_scaling.ipynb")}
    assert listed["ch03_ex3_check"].startswith("Exercise 3:"), listed
    assert listed["ch03_ex1_check"].startswith("Exercise 1:"), listed
