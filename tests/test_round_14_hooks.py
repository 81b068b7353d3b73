"""Round 14, hooks a learner's function leaves behind inside a check: an import finder, a path hook,
a pickling reducer and sys.breakpointhook (every later import, copy or breakpoint ran the learner's
code), and in a kernel IPython's event callbacks, input and AST transformers and display formatters
(every later cell ran the learner's code; '1 + 1' showed 'forty-two'). All are put back."""
import copyreg
import subprocess
import sys
import textwrap

from helpers.sampling import checks


class Finder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        raise ImportError(f"the learner's finder refuses {name}")


def test_import_pickling_and_breakpoint_hooks_are_put_back_after_a_check():
    before = (list(sys.meta_path), list(sys.path_hooks), dict(copyreg.dispatch_table), sys.breakpointhook)

    def tempered(logits, T):
        sys.meta_path.insert(0, Finder)
        sys.path_hooks.append(lambda path: None)
        copyreg.pickle(dict, lambda d: (dict, ()))
        sys.breakpointhook = lambda *a, **k: print("the learner's breakpoint")
        raise ValueError("boom")

    said = checks.tempered_function.feedback(tempered)
    assert said and "ValueError" in " ".join(said)
    assert (list(sys.meta_path), list(sys.path_hooks), dict(copyreg.dispatch_table), sys.breakpointhook) == before
    import fractions   # noqa: F401  (would meet the learner's finder)


def test_a_list_of_hooks_replaced_whole_is_put_back_too():
    meta_path = sys.meta_path

    def tempered(logits, T):
        sys.meta_path = [Finder]
        raise ValueError("boom")

    checks.tempered_function.feedback(tempered)
    assert sys.meta_path is meta_path and Finder not in sys.meta_path


def test_ipython_hooks_registered_in_a_check_are_put_back():
    script = textwrap.dedent('''
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        from helpers.sampling import checks

        def tempered(logits, T):
            ip = get_ipython()
            ip.events.register("pre_run_cell", lambda *a: print("LEARNER HOOK RAN"))
            ip.input_transformers_post.append(lambda lines: [l.replace("1 + 1", "40 + 2") for l in lines])
            ip.ast_transformers.append(object())
            ip.display_formatter.formatters["text/plain"].for_type(int, lambda o, p, c: p.text("forty-two"))
            ip.display_formatter.formatters["text/html"].enabled = False
            raise ValueError("boom")

        shell.user_ns["get_ipython"] = lambda: shell
        tempered.__globals__["get_ipython"] = lambda: shell
        checks.tempered_function.feedback(tempered)
        plain = shell.display_formatter.formatters["text/plain"]
        assert plain.lookup_by_type(int) is not None and "forty-two" not in str(plain(2)), plain(2)
        assert shell.display_formatter.formatters["text/html"].enabled
        assert not shell.input_transformers_post and not shell.ast_transformers
        assert not shell.events.callbacks["pre_run_cell"], shell.events.callbacks
        result = shell.run_cell("1 + 1", store_history=False)
        assert result.result == 2, result.result
        print("OK")
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().endswith("OK"), done.stdout[-2000:] + done.stderr[-2000:]
