"""Chapter 10's exercise checks (ablation)."""
import copy
import types

import numpy as np

from .. import grading
from ..errors import as_array as input_array, check_positive_int, fail, shown, to_numpy, type_name
from ..exercises import (Array, Function, Wrong, as_array, as_number, as_returned, call, close_problems,
                         exercise, model_kept, number_problems, numbers, settled, slip)
from ..real.smollm2 import original_state


def write_back_inputs(concat, W_O, d_k):
    """The check's own concat (T, h·d_k), W_O (h·d_k, d_model) and d_k (h >= 2: head 1 exists), else one sentence."""
    concat, W_O = input_array(concat, "the check's concat", ndim=2), input_array(W_O, "the check's W_O", ndim=2)
    d_k = check_positive_int(d_k, "the check's d_k")
    if concat.shape[1] != W_O.shape[0] or W_O.shape[0] < 2 * d_k:
        fail(f"the check's concat (T, h·d_k) and W_O (h·d_k, d_model) should share h·d_k >= 2·d_k = {2 * d_k}, "
             f"but have shapes {concat.shape} and {W_O.shape}")
    return concat, W_O, d_k


@exercise("the write-back with head 1 removed",
          answer=Array(shape=lambda concat, W_O, d_k: (len(write_back_inputs(concat, W_O, d_k)[0]), np.shape(W_O)[1])))
def write_back(answer, concat, W_O, d_k):
    """answer: concat @ W_O with head 1's rows of W_O zeroed, (T, d_model);
    concat: (T, h·d_k); W_O: (h·d_k, d_model)."""
    concat, W_O, d_k = write_back_inputs(concat, W_O, d_k)
    kept = W_O.copy()
    kept[d_k:2 * d_k] = 0
    found = list(close_problems(answer, concat @ kept, "the write-back"))
    if found:
        yield slip(answer, [
            (concat @ W_O, "that is the full write-back: zero head 1's rows of W_O first (rows d_k to 2·d_k)"),
            (concat[:, d_k:2 * d_k] @ W_O[d_k:2 * d_k],
             "that is head 1's own contribution, the part removed: keep the rest instead"),
        ]) or found[0]


@exercise("Method 2 by hand, to the last bit")   # (the answer read here: a float16 or rounded one is named as such)
def method2_logits(answer, reference):
    """answer: logits (T, V) of a copy with every W_O and b_O zeroed; reference: attention=False logits (T, V).
    Right means equal to the last bit; logits right only to their own precision (a float16 tensor, numbers
    rounded to 4 decimals) are named as such (``settled``), not given the hint of a wrong method."""
    reference = input_array(reference, "the check's reference", ndim=2)
    given, answer = answer, as_array(answer, "your answer", shape=reference.shape)   # (given: with its dtype)
    done = settled(given, answer, reference, "your logits", 0, rtol=0)
    if done is not None:
        yield from done
        return
    diff = np.abs(answer - reference).max()
    if diff > 0:
        yield (f"your logits differ from attention=False by up to {diff:.3g}; zero both W_O and b_O "
               "in every layer of the copy (an exact zero write-back gives identical logits)")


def check_course_model(model):
    """The check's model: a course Transformer (helpers.model.Transformer), else one sentence."""
    from ..model import check_model
    return check_model(model, "the check's model")


def lens_inputs(trace, point, model):
    """The check's trace (model(ids, trace=True) of one sequence), point (one of its residual
    points, (T, d_model)) and model, else one sentence; return the logits' shape (T, V)."""
    import torch
    cfg = check_course_model(model).cfg
    if not isinstance(trace, dict) or not isinstance(trace.get("logits"), torch.Tensor) \
            or trace["logits"].dim() != 2 or trace["logits"].shape[-1] != cfg.vocab_size:
        fail(f"the check's trace should be model(ids, trace=True) of one sequence, but got {shown(trace)}")
    T = trace["logits"].shape[0]
    if type(point) is not str or point not in trace or not isinstance(trace[point], torch.Tensor) \
            or tuple(trace[point].shape) != (T, cfg.d_model):
        fail(f"the check's point should name a residual point of the trace such as 'L0.h', one (T, d_model) = "
             f"({T}, {cfg.d_model}) tensor, but got {shown(point)}")
    return T, cfg.vocab_size


@exercise("one row of the logit lens", answer=Array(shape=lens_inputs))
def lens_row(answer, trace, point, model):
    """answer (T, V): the final LayerNorm, then the unembedding E^T, applied to ``trace[point]``,
    one residual point (T, d_model) of ``model``'s trace."""
    import torch
    lens_inputs(trace, point, model)
    with torch.no_grad():
        h = trace[point]
        expected = model.unembed(h).numpy()
        found = list(close_problems(answer, expected, "the lens row"))
        if not found:
            return
        others = [name for name in trace if name.endswith(("h_mid", ".h")) and name != point] + ["h0"]
        slips = [((h @ model.E.T).numpy(), "these are h @ E.T without the final LayerNorm: the read-out "
                                          "normalises first (model.final_ln)"),
                 (torch.softmax(model.unembed(h), -1).numpy(),
                  "these are probabilities: the lens row asked for is the logits, before the softmax")]
        slips += [(model.unembed(trace[name]).numpy(),
                   f"that is the lens of {name}: take the residual point {point}") for name in others]
    yield slip(answer, slips) or found[0]


def lens_inputs_all(model, trace, points, targets):
    """The check's model, trace (of one sequence, T tokens), points (residual points of the trace, in
    order) and targets (T,) token ids, else one sentence; return (points, targets as a LongTensor)."""
    import torch
    if not isinstance(points, (list, tuple)) or not points:
        fail(f"the check's points should be a non-empty list of residual points such as ['h0', 'L0.h'], but got "
             f"{shown(points)}")
    T, V = lens_inputs(trace, points[0], model)
    for point in points:
        lens_inputs(trace, point, model)
    targets = to_numpy(targets, "the check's targets")
    if targets.shape != (T,) or not (targets == np.round(targets)).all() or targets.min() < 0 or targets.max() >= V:
        fail(f"the check's targets should be ({T},) token ids from 0 to {V - 1}, one per position, but got "
             f"{shown(targets)}")
    return list(points), torch.as_tensor(targets, dtype=torch.long)


def _ranks(logits, targets):
    """(P, T): how many tokens each row of logits (P, T, V) scores above targets (T,)."""
    return (logits > np.take_along_axis(logits, np.broadcast_to(targets, logits.shape[:2])[..., None], -1)).sum(-1)


@exercise("the logit lens at every point and position, with the target's rank",
          answer=Function("a function lens_ranks(model, trace, points, targets)", own=(
              "helpers.patching.logit_lens", "helpers.patching.token_lens", "helpers.real.compute.logit_lens")))
def lens_ranks(answer, model, trace, points, targets):
    """answer(model, trace, points, targets) -> (logits (P, T, V), ranks (P, T)): the final LayerNorm
    and E^T applied to each trace[point], and how many tokens each lens scores above targets[t]; run
    on the check cell's trace and on one the check draws (random tokens and targets, the points in
    another order), so a table computed elsewhere, returned as it is, does not pass."""
    import torch
    points, targets = lens_inputs_all(model, trace, points, targets)
    g = torch.Generator().manual_seed(10)
    T, V = len(targets), model.cfg.vocab_size
    with torch.no_grad():
        drawn = model(torch.randint(V, (T,), generator=g), trace=True)
    cases = (("on the cat model's trace", trace, points, targets),
             ("on a trace of random tokens the check draws", drawn,
              [points[i] for i in torch.randperm(len(points), generator=g)], torch.randint(V, (T,), generator=g)))
    with model_kept(model):   # a weight it changes is put back before the check computes its own
        answers = [as_returned(call(answer, model, *case, what=where)) for where, *case in cases]
    for n, ((where, *case), got) in enumerate(zip(cases, answers)):
        if n and got is None:
            raise Wrong(f"lens_ranks returned None {where}: return the logits and the ranks for every trace")
        found = first_problem(lens_problems(got, model, *case), where if n else "")
        if found:
            yield found
            return


def lens_problems(got, model, trace, points, targets):
    """The sentences for what a lens_ranks returned, ``got``, on this trace, points and targets (T,)
    when it is not the right (logits, ranks): a known slip's hint first."""
    import torch
    if got is None or isinstance(got, tuple) and len(got) == 2 and got[0] is None and got[1] is None:
        raise Wrong("not answered yet: lens_ranks returns None; write its body where the cell says "
                    "# YOUR CODE HERE, so that it returns the logits and the ranks")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Wrong(f"lens_ranks should return two things, (logits, ranks), but returned {type(got).__name__}")
    with torch.no_grad():
        rows = {p: trace[p] for p in points}
        right = np.stack([model.unembed(h).numpy() for h in rows.values()])             # (P, T, V)
        no_norm = np.stack([(h @ model.E.T).numpy() for h in rows.values()])
    P, T, V = right.shape
    logits = numbers(got[0], "the logits", shape=(P, T, V))
    found = list(close_problems(logits, right, "the array of lens logits"))
    if found:
        e = np.exp(right - right.max(-1, keepdims=True))
        yield slip(logits, [
            (no_norm, "these are h @ E.T without the final LayerNorm: the read-out normalises first (model.final_ln)"),
            (e / e.sum(-1, keepdims=True), "these are probabilities: the lens asked for is the logits, before the softmax"),
            (right[::-1], "the points are in reverse order: row p should be the lens of points[p]"),
            (np.broadcast_to(trace["logits"].numpy(), right.shape), "every row is the model's own output: apply the "
             "read-out to each point's residual stream, trace[point], not to the last one"),
        ]) or found[0]
        return
    rank = numbers(got[1], "the ranks", shape=(P, T))
    right_rank = _ranks(right, targets.numpy())
    found = list(close_problems(rank, right_rank, "the array of ranks", atol=0))
    if found:
        top = right.argmax(-1)
        yield slip(rank, [
            (right_rank + 1, "the ranks count from 1: here rank 0 means the target is the lens's top token (count "
             "the tokens scored above it)"),
            ((right < np.take_along_axis(right, np.broadcast_to(targets.numpy(), (P, T))[..., None], -1)).sum(-1),
             "that counts the tokens scored below the target: count those scored above it"),
            (top, "those are the lens's top tokens (the argmax): the rank is how many tokens score above the target"),
            (_ranks(right, np.roll(targets.numpy(), 1)), "the ranks are one position off: position t's target is "
             "targets[t]"),
            (_ranks(right, np.roll(targets.numpy(), -1)), "the ranks are one position off: position t's target is "
             "targets[t], not targets[t + 1]"),
            (_ranks(no_norm, targets.numpy()), "these ranks come from h @ E.T without the final LayerNorm: rank the "
             "lens logits you return"),
        ], atol=0) or found[0]


# ------------------------------------------------------------ the learner writes the methods

ABLATION_HEADS = ((1, 0), (0, 1))   # the heads the check ablates, in order


def _course_drop(model, head, task_ids, class_ids, reference_ids, kind="mean", per_position=True, others=False,
                 over_heads=False, pool="sum", softmax_dim=-1):
    """The fall in mean p(class) at the last position of task_ids when ``head``'s output is replaced
    (the course's reference for the check and its known slips: over_heads averages the mean over
    the layer's heads too, pool="max" takes the larger class probability instead of their sum,
    softmax_dim=1 normalises the logits over the positions instead of the vocabulary)."""
    import torch
    from .. import patching
    layer, h = head
    heads = [(layer, g) for g in range(model.cfg.n_heads)] if others else [head]
    means = patching.mean_head_outputs(model, reference_ids, per_position=per_position) if kind == "mean" else None
    if over_heads:
        means = {l: m.mean(0, keepdim=True).expand_as(m) for l, m in means.items()}
    with torch.no_grad():
        def p_class(**kw):
            probs = torch.softmax(model(task_ids, **kw).double(), softmax_dim)[:, -1]
            chosen = probs.gather(-1, class_ids)
            return (chosen.max(-1).values if pool == "max" else chosen.sum(-1)).mean()
        base = p_class()
        ablated = p_class(replace=patching.ablation_replace(heads, kind, means))
    return dict(drop=float(base - ablated), base=float(base), ablated=float(ablated))


def ablation_inputs(model, task_ids, class_ids, reference_ids, off_task_ids):
    """The check's model, prompts (B, T) and each prompt's class ids (B, k) of that model, else one sentence."""
    import torch
    from .. import patching
    cfg = check_course_model(model).cfg
    prompts = {}
    for name, ids in (("task_ids", task_ids), ("reference_ids", reference_ids), ("off_task_ids", off_task_ids)):
        prompts[name] = patching.check_ids(model, ids, name=name)
        if prompts[name].dim() != 2:
            fail(f"the check's {name} should be a batch of prompts (B, T), but got shape {tuple(prompts[name].shape)}")
    B = len(prompts["task_ids"])
    if not isinstance(class_ids, torch.Tensor) or class_ids.dtype != torch.long or class_ids.dim() != 2 \
            or len(class_ids) != B or not class_ids.numel() or class_ids.min() < 0 or class_ids.max() >= cfg.vocab_size:
        fail(f"the check's class_ids should be a LongTensor (B, k) = ({B}, k) of token ids below {cfg.vocab_size}, "
             f"but got {shown(class_ids)}")


# The course's code that captures head outputs, averages them, ablates with the means or measures p(class) under an
# ablation: the model's replace switch is the exercise's building block (chapter 11's mean_ablation is such code too).
DROP_OWN = ("helpers.ablation.compute.cat_ablation", "helpers.patching.mean_head_outputs",
            "helpers.patching.ablation_replace", "helpers.ablation.checks._course_drop", "helpers.real.circuit.mean_ablation",
            "helpers.real.circuit.capture", "helpers.patching.capture", "helpers.patching.head_outputs",
            "helpers.ablation.compute.rule_ablation", "helpers.ablation.compute.rule_probs",
            "helpers.ablation.compute.copula_figures", "helpers.ablation.compute._rule_figures")


@exercise("a task-matched mean ablation", answer=Function("a function mean_ablation_drop(model, head, task_ids, "
                                                            "class_ids, reference_ids)", own=DROP_OWN))
def mean_ablation_drop(answer, model, task_ids, class_ids, reference_ids, off_task_ids):
    """answer(model, head, task_ids, class_ids, reference_ids) -> the fall in mean p(class) over the
    task prompts when ``head``'s output is replaced by its per-position mean over reference_ids.
    Checked on the cat model for ABLATION_HEADS with the task's own prompts as the reference."""
    ablation_inputs(model, task_ids, class_ids, reference_ids, off_task_ids)
    for head in ABLATION_HEADS:
        where = f"for L{head[0]}H{head[1]}"
        with model_kept(model):   # a function that changes a weight changes nothing the check computes next
            got = call(answer, model, head, task_ids, class_ids, reference_ids, what=where)
        if got is None:
            raise Wrong("not answered yet: mean_ablation_drop returns None; write its body where the cell says "
                        "# YOUR CODE HERE, so that it returns the fall in p(class)")
        value = as_number(got, f"what mean_ablation_drop returned {where}")   # text, True, NaN: one sentence
        right = _course_drop(model, head, task_ids, class_ids, reference_ids)
        if abs(value - right["drop"]) <= 1e-4:
            continue
        other = (head[0], 1 - head[1])
        hint = slip(value, [
            (_course_drop(model, head, task_ids, class_ids, off_task_ids)["drop"],
             "that mean is taken over the wrong prompts (all 64 sentence types): take it over reference_ids, "
             "the task's own prompts"),
            (_course_drop(model, head, task_ids, class_ids, reference_ids, per_position=False)["drop"],
             "that mean is taken over the positions too: average over the reference prompts only (axis 0), "
             "one mean per position"),
            (_course_drop(model, head, task_ids, class_ids, reference_ids, kind="zero")["drop"],
             "that is zero ablation: put the head's mean output over the reference in its place, not 0"),
            (right["ablated"], "that is p(class) after the ablation: return the fall, p(class) before minus after"),
            (-right["drop"], "the sign is turned round: return p(class) before the ablation minus after it"),
            (_course_drop(model, head, task_ids, class_ids, reference_ids, others=True)["drop"],
             f"every head of layer {head[0]} was replaced: replace only head {head[1]}'s slice x[:, {head[1]}]"),
            (_course_drop(model, other, task_ids, class_ids, reference_ids)["drop"],
             f"that is the fall for L{other[0]}H{other[1]}: replace head {head[1]} of \"L{head[0]}.head_out\""),
            (_course_drop(model, head, task_ids, class_ids, reference_ids, over_heads=True)["drop"],
             f"that mean is taken over the heads too: average head {head[1]}'s own output x[:, {head[1]}] "
             "over the reference prompts, one mean per position"),
            (_course_drop(model, head, task_ids, class_ids, reference_ids, pool="max")["drop"],
             "that takes the larger of the two class probabilities: p(class) is their sum over the two "
             "class adjectives (.sum(-1) after gather)"),
            (_course_drop(model, head, task_ids, class_ids, reference_ids, softmax_dim=1)["drop"],
             "that softmax runs over the positions: turn the last position's logits into probabilities over "
             "the vocabulary, softmax(logits[:, -1], dim=-1)"),
        ], atol=1e-4)
        yield f"{where}: " + (hint or next(number_problems(value, right["drop"], "the fall in p(class)", atol=1e-4)))
        return
    head = ABLATION_HEADS[0]                 # the same call with another reference must give another fall
    where = f"for L{head[0]}H{head[1]} with the 64 sentence types as reference_ids"
    with model_kept(model):
        got = call(answer, model, head, task_ids, class_ids, off_task_ids, what=where)
    if got is None:
        raise Wrong(f"mean_ablation_drop returned None {where}: return the fall in p(class) for every reference")
    value = as_number(got, f"what mean_ablation_drop returned {where}")
    right = _course_drop(model, head, task_ids, class_ids, off_task_ids)["drop"]
    if abs(value - right) > 1e-4:
        hint = slip(value, [
            (_course_drop(model, head, task_ids, class_ids, task_ids)["drop"],
             "your function ignores reference_ids: it takes the mean over task_ids whatever reference it is "
             "given; take the mean over reference_ids"),
        ], atol=1e-4)
        yield f"{where}: " + (hint or next(number_problems(value, right, "the fall in p(class)", atol=1e-4)))


def function_copy(function, memo=None):
    """A copy of ``function`` for a learner's code: a Python function is made again with deep copies
    of what its closure, defaults and attributes hold (a function among them copied the same way), so
    changing them in place (metric.__closure__[0].cell_contents[:] = ...) leaves ``function`` as it
    was; any other callable is deep-copied. What cannot be copied is shared."""
    memo = {} if memo is None else memo
    if not isinstance(function, types.FunctionType):
        try:
            return copy.deepcopy(function, memo)
        except Exception:   # noqa: BLE001 (an object of the learner's may refuse to be copied in any way)
            return function
    if id(function) in memo:
        return memo[id(function)]
    cells = tuple(types.CellType() for _ in function.__closure__ or ())
    twin = types.FunctionType(function.__code__, function.__globals__, function.__name__, None, cells or None)
    memo[id(function)] = twin
    for cell, own in zip(cells, function.__closure__ or ()):
        try:
            cell.cell_contents = function_copy(own.cell_contents, memo)
        except ValueError:   # an empty cell (a name the function's scope has not bound yet)
            pass
    twin.__defaults__ = function_copy(function.__defaults__, memo)
    twin.__kwdefaults__ = function_copy(function.__kwdefaults__, memo)
    twin.__dict__.update(function_copy(dict(function.__dict__), memo))
    twin.__qualname__, twin.__module__, twin.__doc__ = function.__qualname__, function.__module__, function.__doc__
    return twin


def _metric_call(function, *args):
    """``function(*args)`` through ``call`` (a thread of its own, the learner's time limit), for the check
    cell's metric: a notebook function a learner can rewrite, so the check never runs it unbounded. Its
    stop, error or time-out is one sentence about the check cell's argument (CourseInputError, which the
    patching functions pass on as it is and the check shows as the cell's, not the answer's, problem)."""
    try:
        return call(function, *args)
    except Wrong as wrong:   # call's sentence names "your function": here, the metric
        fail(f"the check cell's metric should be a function metric(out) that returns one number per row, "
             f"but running it failed ({str(wrong).replace('your function', 'metric')})")


def bounded_metric(metric):
    """``metric`` run only through ``_metric_call``: what the check's own patching runs call instead
    of the check cell's metric (out: {"logits": (rows, T, V)} -> (rows,))."""
    return lambda out: _metric_call(metric, out)


@exercise("a patching loop over heads and positions",
          answer=Function("a function patch_grid(model, clean_ids, corrupt_ids, metric)",
                          own=("helpers.patching.patch_heads", "helpers.ablation.compute.per_pair",
                               "helpers.patching.metric_ends", "helpers.patching.normalised")))
def patch_grid(answer, model, clean_ids, corrupt_ids, metric):
    """answer(model, clean_ids, corrupt_ids, metric) -> (layers, heads, T): the normalised metric
    (0 = corrupted run, 1 = clean run) after putting one head's clean output at one position into
    the corrupted run (denoising), for every head and position; run on the check cell's pair and on
    the same pair swapped, whose ends swap too (so a grid computed elsewhere, returned as it is, does
    not pass)."""
    from .. import patching
    check_course_model(model)
    words = metric.__dict__.get("vocab_size") if isinstance(metric, types.FunctionType) else None
    if isinstance(words, int) and words != model.cfg.vocab_size:   # a course metric names its world's size
        fail(f"the check's model should be a model of the metric's world (a vocabulary of {words} words: the cat "
             f"model), but it has {model.cfg.vocab_size}")
    one = {}
    for name, ids in (("clean_ids", clean_ids), ("corrupt_ids", corrupt_ids)):
        one[name] = patching.check_ids(model, ids, name=name)
        if one[name].dim() != 1:
            fail(f"the check's {name} should be one prompt (T,), but got shape {tuple(one[name].shape)}")
    if not grading.is_callback(metric):   # by its type alone: an object's own code would run unbounded
        fail(f"the check cell's metric should be a function metric(out) -> one number per row (def or lambda), "
             f"but got a {type_name(metric)}")
    # the metric is the notebook's, which a learner may rewrite: the check runs it only through call. A
    # copy for each call of the learner's function: one that changes what the metric captured (its word
    # lists) changes neither the grid it is compared with nor the notebook's metric (copying may run a
    # __deepcopy__)
    copies = [_metric_call(function_copy, metric) for _ in range(2)]
    metric = bounded_metric(metric)
    clean_v, corrupt_v = patching.metric_ends(model, one["clean_ids"][None], one["corrupt_ids"][None], metric, ())
    patching.normalised(clean_v, clean_v, corrupt_v)     # the metric should tell the two runs apart
    cases = (("on the cat model", clean_ids, corrupt_ids, (clean_v, corrupt_v)),
             ("on the same two prompts swapped (the check cell's corrupted prompt as clean_ids)", corrupt_ids,
              clean_ids, (corrupt_v, clean_v)))
    rights = [patching.patch_heads(model, clean, corrupt, metric, per_position=True).numpy()
              for _, clean, corrupt, _ in cases]
    with model_kept(model):   # a weight it changes is put back before the check computes its own
        answers = [as_returned(call(answer, model, clean, corrupt, copied, what=where))
                   for (where, clean, corrupt, _), copied in zip(cases, copies)]
    for n, ((where, clean, corrupt, ends), right, got) in enumerate(zip(cases, rights, answers)):
        if got is None:
            raise Wrong("not answered yet: patch_grid returns None; write its loop where the cell says "
                        "# YOUR CODE HERE, so that it returns the grid" if not n else
                        f"patch_grid returned None {where}: return the grid for every pair of prompts")
        found = first_problem(grid_problems(got, right, model, clean, corrupt, metric, ends), where if n else "")
        if found:
            yield found
            return


def first_problem(problems, where=""):
    """The first sentence of ``problems`` (a generator), else None; ``where`` ("on ..."), if given, begins
    it, and the sentence of a Wrong the generator raises too (a second case's: the first case's is said as
    it is)."""
    try:
        found = next(problems, None)
    except Wrong as wrong:
        if not where:
            raise
        raise Wrong(f"{where}: {wrong}") from None
    return f"{where}: {found}" if where and found else found


def grid_problems(got, right, model, clean_ids, corrupt_ids, metric, ends):
    """The sentences for a patch_grid answer ``got`` that is not ``right`` (layers, heads, T) on this pair of
    prompts, whose metric (bounded) gives ``ends``, (clean, corrupted): a known slip's hint first."""
    from .. import patching
    L, H, T = model.cfg.n_layers, model.cfg.n_heads, len(right[0, 0])
    grid = numbers(got, "the grid", shape=(L, H, T))   # True/False, complex, text: a sentence about the grid
    found = list(close_problems(grid, right, "the grid", atol=1e-3))
    if not found:
        return
    clean_v, corrupt_v = ends
    noise = patching.patch_heads(model, clean_ids, corrupt_ids, metric, per_position=True, direction="noise").numpy()
    whole = patching.patch_heads(model, clean_ids, corrupt_ids, metric).numpy()
    shifted = np.zeros_like(right)
    shifted[..., 1:] = right[..., :-1]
    ahead = np.zeros_like(right)
    ahead[..., :-1] = right[..., 1:]
    yield slip(grid, [
        (right * (clean_v - corrupt_v) + corrupt_v, "these are the patched runs' raw metric values: normalise "
         "them, (patched - corrupted) / (clean - corrupted), so 0 is the corrupted run and 1 the clean run"),
        (right * (clean_v - corrupt_v), "these are the changes the patches made: divide by the whole gap, "
         "clean minus corrupted"),
        (-right, "the denominator is flipped: divide by clean - corrupted, not corrupted - clean"),
        (right - 1, "that numerator is patched - clean (the noising normalisation, as in ARENA's metric: 0 = "
         "clean, -1 = corrupted): for denoising measure from the corrupted run, (patched - corrupted) / "
         "(clean - corrupted)"),
        (right.transpose(1, 0, 2), "layers and heads are swapped: entry [layer, head, t] should patch head "
         "`head` of \"L{layer}.head_out\""),
        (np.zeros_like(right), "every patch left the corrupted run as it was: take the head's output from the "
         "clean run and put it into the corrupted run"),
        (1 - right, "that is the fraction still missing: measure how far each patch moved the corrupted run "
         "towards the clean one"),
        (noise, "that patches the other way, corrupted outputs into the clean run (noising): run the corrupted "
         "prompt and put the clean head output in"),
        (np.repeat(whole[..., None], T, -1), "each head was patched at every position at once: put in the clean "
         "output at position t only, x[:, head, t]"),
        (shifted, "the grid is one position off: entry t should patch position t (count positions from 0)"),
        (ahead, "the grid is one position off: entry t should patch position t, not t + 1"),
    ]) or found[0]


def _attribution_variants(model, parts, direction, scale):
    """{mistake: the dict a known wrong direct logit attribution gives} for the check's hints."""
    import torch
    from .. import patching
    ln, u = model.final_ln, None
    with torch.no_grad():
        u = model.E.T @ torch.as_tensor(direction, dtype=model.E.dtype)
        gamma, beta = ln.weight, getattr(ln, "bias", None)
        centre = not isinstance(ln, torch.nn.RMSNorm)
        own = patching.final_norm_scale(model, sum(parts.values()))

        def write(p, s=scale, centred=centre, g=gamma, plus=0.0):
            return float((((p - p.mean()) if centred else p) / s * g + plus) @ u)
        out = {
            "recomputed": {n: write(p, s=own) for n, p in parts.items()},
            "uncentred": {n: write(p, centred=False) for n, p in parts.items()},
            "centred": {n: write(p, centred=True) for n, p in parts.items()},
            "no gamma": {n: write(p, g=torch.ones_like(gamma)) for n, p in parts.items()},
            "variance": {n: write(p, s=scale ** 2) for n, p in parts.items()},
            "no scale": {n: write(p, s=1.0) for n, p in parts.items()},
            "own scale": {n: write(p, s=patching.final_norm_scale(model, p)) for n, p in parts.items()},
        }
        if beta is not None:
            out["own norm"] = {n: write(p, s=patching.final_norm_scale(model, p), plus=beta) for n, p in parts.items()}
            out["beta scaled"] = {**{n: write(p) for n, p in parts.items()}, "final-norm bias": float(beta / scale @ u)}
            out["beta everywhere"] = {n: write(p, plus=beta) for n, p in parts.items()}
            for wrong in out.values():
                wrong.setdefault("final-norm bias", float(beta @ u))
    return out


def function_name(answer):
    """What a sentence calls the learner's function: its own name (``rms_attribution``) when it is a short
    Python name, else "your function" (a name set by hand may be any text, 10 MB of it)."""
    name = getattr(answer, "__name__", None)   # (a function's, a bound method's or a class's: none runs code of theirs)
    return name if type(name) is str and name.isidentifier() and len(name) <= 40 else "your function"


def names_shown(names):
    """The first three of ``names`` (the keys of parts, or of a learner's dict), each quoted by ``shown``: a
    sentence never writes out a key in full (an int of 5,000 digits, a 10 MB text)."""
    return "[" + ", ".join(map(shown, names[:3])) + (", ...]" if len(names) > 3 else "]")


@exercise("direct logit attribution with a frozen scale",
          answer=Function("a function direct_attribution(model, parts, direction, scale)",
                          own=("helpers.patching.direct_logit_attribution", "helpers.patching.attribute",
                               "helpers.patching.direct_effects", "helpers.ablation.compute.induction_direct_effects",
                               "helpers.real.circuit.pair_shares", "helpers.real.circuit.frozen_scale_test")))
def direct_attribution(answer, model, parts, direction, scale):
    """answer(model, parts, direction, scale) -> {name: float}: each part's direct contribution to
    direction · logits with the final norm's scale frozen at ``scale`` (``patching.attribute``); run on
    the check cell's parts and on parts the check draws, the same ones with their numbers shuffled (the
    direction's too), so a dict computed elsewhere, returned as it is, does not pass."""
    import torch
    from .. import patching
    right = patching.attribute(check_course_model(model), parts, direction, scale)   # checks every argument
    g = torch.Generator().manual_seed(10)

    def shuffled(t):   # (n,) -> its numbers in an order the check draws
        return t[torch.randperm(len(t), generator=g)]
    drawn = ({name: shuffled(p) for name, p in parts.items()}, shuffled(patching.check_direction(model, direction)),
             scale)
    cases = (("on the parts the check cell gives it", (parts, direction, scale), right),
             ("on parts the check draws (each part's numbers shuffled, the direction's too)", drawn,
              patching.attribute(model, *drawn)))
    fn = function_name(answer)
    with model_kept(model, pristine=original_state(model)):   # SmolLM2's weights are read again, not copied
        answers = [as_returned(call(answer, model, *args, what=where)) for where, args, _ in cases]
    for n, ((where, args, right), got) in enumerate(zip(cases, answers)):
        if got is None:
            raise Wrong(f"not answered yet: {fn} returns None; write its body where the cell says "
                        "# YOUR CODE HERE, so that it returns one number per part" if not n else
                        f"{fn} returned None {where}: return one number per part for any parts")
        found = first_problem(attribution_problems(got, fn, right, model, *args), where if n else "")
        if found:
            yield found
            return


def attribution_problems(got, fn, right, model, parts, direction, scale):
    """The sentences for what a direct_attribution, named ``fn``, returned (``got``) on these parts, direction
    and scale, whose right contributions are ``right`` ({name: float}): a known slip's hint first."""
    if not isinstance(got, dict):
        raise Wrong(f"{fn} should return a dict {{part name: number}}, but returned {type(got).__name__}")
    missing = [name for name in right if name not in got]
    if missing == ["final-norm bias"]:
        yield ("the final LayerNorm's β is missing: add one entry \"final-norm bias\", β · E^T · direction "
               "(the part no input changes)")
        return
    bias = " and the final-norm bias" if "final-norm bias" in right else ""
    if missing:
        yield f"the dict should hold one entry per part{bias}, but misses {names_shown(missing)}"
        return
    extra = [name for name in got if name not in right]
    if extra:
        yield (f"the dict should hold one entry per part{bias} only, but it also holds "
               f"{len(extra)} other{'s' if len(extra) > 1 else ''}: {names_shown(extra)}")
        return
    values = np.array([as_number(got[name], f"the entry {shown(name)} of your dict") for name in right])
    expected = np.array(list(right.values()))
    found = list(close_problems(values, expected, "the set of contributions", atol=1e-4))
    if not found:
        return
    import torch
    variants = _attribution_variants(model, parts, direction, scale)
    hints = {"recomputed": "the norm's scale was recomputed from these parts: freeze it at the scale given, the one "
                           "of the run whose logits are explained",
             "no scale": "the parts were not divided by the scale: divide each by the frozen divisor given",
             "uncentred": "the parts were not centred: a LayerNorm subtracts each vector's mean over d_model first",
             "centred": "the parts were centred: an RMSNorm does not subtract the mean, it only divides by its scale",
             "no gamma": "γ is missing: multiply each centred, scaled part by the final LayerNorm's weight",
             "variance": "that divides by the variance: the scale is its square root, √(var + ε)",
             "beta everywhere": "β was added to every part: it belongs to the final LayerNorm once, in its own entry",
             "own scale": "each part was divided by its own scale: divide every part by the one scale given, the "
                          "final LayerNorm divisor of the run explained (a LayerNorm of the sum is not the sum of "
                          "LayerNorms)",
             "own norm": "each part went through its own LayerNorm: centre each part, then divide every part by the "
                         "one scale given (the run explained), multiply by γ, and add β once, in its own entry",
             "beta scaled": "β was divided by the scale: the LayerNorm adds β after the division, so its entry is "
                            "β · E^T · direction"}
    if isinstance(model.final_ln, torch.nn.RMSNorm):   # SmolLM2 (chapter 11): no centring, no β, a root mean square
        del hints["uncentred"]                         # an RMSNorm's right answer is uncentred
        hints.update({
            "no gamma": "γ is missing: multiply each scaled part by the final RMSNorm's weight",
            "variance": "that divides by the mean square: the scale is its square root, √(mean(h²) + ε)",
            "own scale": "each part was divided by its own scale: divide every part by the one scale given, the "
                         "final RMSNorm's divisor of the run explained (an RMSNorm of the sum is not the sum of "
                         "RMSNorms)"})
    yield slip(values, [(np.array([v[name] for name in right]), hints[k]) for k, v in variants.items() if k in hints],
               atol=1e-4) or found[0]
