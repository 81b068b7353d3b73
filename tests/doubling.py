"""The smallest exercise check there is, shared by the tests of how a check runs a learner's function:
the answer is a function of x, called once on x = 2, and should return 4."""
from helpers.exercises import Function, call, exercise


def doubling_check(seconds):
    """An Exercise whose check calls the learner's function on x = 2 with a time limit of ``seconds``."""
    @exercise("a function", answer=Function("a function of x"))
    def doubles(answer):
        if call(answer, 2, what="on x=2", seconds=seconds) != 4:
            yield "not double"
    return doubles
