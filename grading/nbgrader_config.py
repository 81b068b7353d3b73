# nbgrader's configuration for grading the course's chapters as homework.
# This folder is nbgrader's course directory; scripts/homework.py runs nbgrader in it:
#   source/<chapter>/<chapter>.ipynb       copied from notebooks/ by `homework.py release`
#   release/<chapter>/<chapter>.ipynb      the student version you hand out
#   submitted/<student>/<chapter>/…        what students handed in (copied by `homework.py grade`)
#   autograded/, feedback/, gradebook.db   nbgrader's results; scores.csv, the score table
# None of these generated folders is committed (see .gitignore here).
c = get_config()  # noqa: F821  (nbgrader provides get_config)

c.CourseDirectory.course_id = "transformer-course"

# The student version keeps `answer = None` and the line below, so an unanswered
# exercise leaves the notebook running (the default stub raises NotImplementedError).
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Autograding runs the whole chapter; the slowest cells (UMAP's first fit) take ~15 s.
c.Execute.timeout = 300
c.Execute.interrupt_on_timeout = True

