"""One-sentence input checks shared by every public helper.

Each check raises ``ValueError`` (or ``TypeError``) whose message names what was
expected and what arrived, e.g. ``"K has d_k=4 but Q has d_k=5"``.
"""
import math
import re

import numpy as np


class CourseInputError(ValueError):
    """Bad input to a course helper; the message is one sentence for a learner."""


def fail(message):
    """Raise a CourseInputError with ``message``."""
    raise CourseInputError(message)


def to_numpy(x, name="the input", bools=False):
    """``x`` (a torch tensor, with or without grad, a NumPy array, a list, a number) as a
    float64 NumPy array: the package's one converter. Complex or non-numeric input fails, and so does
    a tensor ``check_tensor`` refuses (nested, sparse, quantized, meta), before its data is touched.
    True and False are no numbers (they would be read as 1 and 0): a bool array, tensor or entry is
    refused unless ``bools`` (a mask, or a learner's answer a check compares). An object of the
    learner's (a tensor subclass, say) that raises anything when read is refused in one sentence too."""
    try:
        return numbers_of(x, name, bools)
    except CourseInputError:
        raise
    except Exception as error:   # noqa: BLE001 (a learner's object or tensor subclass may raise anything when read)
        unreadable(x, error, f"{name} should be an array of numbers")


def unreadable(x, error, should):
    """Refuse ``x``, an object of the learner's that raised ``error`` when it was read (its length, its entries),
    in one sentence that starts with ``should`` ("perm should be a list of whole numbers")."""
    fail(f"{should}, but got a {type_name(x)} that raised {class_name(type(error))} when it was read")


def numbers_of(x, name, bools):
    """The work of ``to_numpy`` (see there), which turns what this raises into one sentence."""
    if x is None:
        fail(f"{name} is None, but expected an array of numbers")
    if isinstance(x, (bool, np.bool_)):
        fail(f"expected {name} as an array of numbers, but got {x!r}")
    if isinstance(x, (list, tuple)):   # counted before anything reads its entries (NumPy's copy may be far larger)
        check_numbers(nested_size(x), name)
    if not bools and (is_bool(x) or has_bools(x)):
        refuse_bools(name)
    if isinstance(x, range):   # made lazily: converting one costs about 48 bytes a number, counted first
        check_bytes(48 * length(x), f"{name} (a range of {count(length(x))} numbers)", "give a shorter range")
    if is_tensor(x):
        x = tensor_numbers(x, name)
    elif isinstance(x, (list, tuple)) and any(is_tensor(v) for v in x):   # NumPy would read each with .numpy(),
        check_bytes(8 * sum(entries(v, name) for v in x), f"{name} (a list of tensors)", "give smaller tensors")
        x = [tensor_numbers(v, name) if is_tensor(v) else v for v in x]   # which fails with grad or a negative bit
    if isinstance(x, np.ma.MaskedArray) and np.ma.is_masked(x):
        fail(f"{name} should be an array of numbers, but it is a masked array with hidden entries "
             "(fill them first with x.filled(0.0))")
    if type(x) is int and not -2**1024 < x < 2**1024:
        fail(f"{name} should be a number a float can hold (at most about 1.8e308), but got {shown(x)}")
    try:
        arr = np.asarray(x)   # its own type first: text in it would otherwise be read as numbers
    except MemoryError:
        fail(f"{name} should be an array of numbers that fits in memory, but got {type(x).__name__} {shown(x)}")
    except Exception as error:   # noqa: BLE001 (a learner's object may raise anything from __array__ or __len__)
        ragged = isinstance(x, (list, tuple)) and "inhomogeneous" in message_of(error)
        fail(f"{name} should be an array of numbers{' with rows of one length' if ragged else ''}, but got "
             f"{type(x).__name__} {shown(x)}")
    # a view may stand for more numbers than it stores (np.broadcast_to(0.0, 10**9) holds one): counted first
    check_numbers(arr.size, name)
    if arr.dtype.kind in "mMV":   # times, dates and records are no numbers, though NumPy may convert them
        fail(f"{name} should be an array of numbers, but it holds "
             f"{'records' if arr.dtype.kind == 'V' else 'dates or times'} (dtype {arr.dtype})")
    check_float64_range(arr, name)
    try:
        kind = arr.dtype.kind
        boolean = kind == "b" or kind == "O" and any(is_bool(v) for v in arr.flat)
        if kind == "O" and any(isinstance(v, (str, bytes)) for v in arr.flat):
            kind, arr = "U", np.asarray([v for v in arr.flat if isinstance(v, (str, bytes))])
        nothing = kind == "O" and any(v is None for v in arr.flat)   # astype(float) would read None as NaN
        if kind not in "USc" and not nothing:
            arr = arr.astype(float, copy=False)
    except Exception:   # noqa: BLE001 (an entry's __float__ may raise anything)
        fail(f"{name} should be an array of numbers, but got {type(x).__name__} {shown(x)}")
    if nothing:
        fail(f"{name} should hold numbers, but it holds None among them")
    if boolean and not bools:
        refuse_bools(name)
    if kind == "c":
        fail(f"{name} should hold real numbers, but it holds complex ones")
    if kind in "US":
        fail(f"{name} should be an array of numbers, but it holds text ({shown(str(arr.flat[0]) if arr.size else x)}): "
             "write the numbers without quotes")
    return arr


def check_numbers(size, name):
    """Refuse an array of ``size`` numbers whose float64 copy would pass MAX_BYTES, in one sentence."""
    if 8 * size > MAX_BYTES:   # (the sentence made only then: to_numpy is called everywhere)
        check_bytes(8 * size, f"{name} (an array of {count(size)} numbers)", "give a smaller array")


def nested_size(x):
    """How many numbers NumPy would make of a list or tuple ``x``, read without copying it: the product of the
    lengths along its first entry at each depth (the built-ins' own, ``length``: a subclass's ``__len__`` may lie), an
    array's size at the bottom; up to NumPy's 64 axes (a list may hold itself). Exact for a list NumPy converts (a
    ragged one it refuses); a text, a number or anything else ends the count."""
    size = 1
    for _ in range(64):
        if isinstance(x, np.ndarray):
            return size * x.size
        if not isinstance(x, (list, tuple)):
            return size
        n = len(x) if type(x) is list or type(x) is tuple else length(x)
        if n == 0:
            return 0
        size *= n
        x = list.__getitem__(x, 0) if isinstance(x, list) else tuple.__getitem__(x, 0)
    return size


def check_float64_range(arr, name):
    """Refuse a long double array ``arr`` (np.longdouble: wider than float64) holding a finite number past
    float64's range, about 1.8e308, which the cast to float64 would make inf (with NumPy's warning); its NaN and
    inf are left to the caller's finite check."""
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        too_big = np.isfinite(arr) & (np.abs(arr) > np.finfo(np.float64).max)
        if too_big.any():
            size = np.format_float_scientific(np.abs(arr[too_big]).max(), precision=2, unique=False)
            fail(f"{name} should hold numbers a float64 can hold (each of size at most about 1.8e308), "
                 f"but one has size {size}")


def is_tensor(x):
    """Whether ``x`` is a torch tensor (anything with ``detach`` and ``numel``), told without importing torch and
    without reading its shape (a nested tensor's shape raises)."""
    return hasattr(x, "detach") and hasattr(x, "numel")


def tensor_numbers(x, name):
    """A torch tensor's numbers as a NumPy array, counted and checked first (``check_tensor_size``: an expanded
    tensor stands for more numbers than it stores), then detached, on the CPU, a set negative bit resolved (a view
    such as ``z.conj().imag`` reads its numbers negated, and .numpy() refuses it), bfloat16 and the float8 kinds as
    float32 (NumPy has no such types). A tensor NumPy cannot read (torch.bits8, a ZeroTensor, a subclass whose
    .numpy() refuses) is refused in one sentence."""
    x = check_tensor_size(x, name, float8=True)
    try:
        x = x.detach().cpu().resolve_neg()
        if x.is_floating_point() and str(x.dtype) not in ("torch.float16", "torch.float32", "torch.float64"):
            x = x.float()
        return x.numpy()
    except Exception:   # noqa: BLE001 (torch's own refusal, whose type depends on the kind of tensor)
        kind = "tensor" if type_name(x) in ("Tensor", "Parameter") else f"tensor ({type_name(x)})"
        fail(f"{name} should be an array of numbers, but got a {kind} of dtype {x.dtype}, which NumPy cannot read")


BUILT_IN_SIZED = (str, bytes, list, tuple, dict, set, frozenset)


def length(x):
    """len(x), a text's, list's, tuple's, dict's or set's read by the built-in's own length (a subclass's ``__len__``
    may lie or raise), and a range's also when too long for len() to say (range(10**20)): counted from its ends."""
    kind = next((kind for kind in BUILT_IN_SIZED if isinstance(x, kind)), None)
    try:
        return len(x) if kind is None else kind.__len__(x)
    except OverflowError:
        step = x.step
        return max(0, (x.stop - x.start + step - (1 if step > 0 else -1)) // step)


def items_of(x):
    """A list's or tuple's entries as a new list, read by the built-in's own iterator (a subclass's ``__len__``, which
    list() asks first, or its ``__iter__`` may lie or raise), each text among them a plain str (``plain``)."""
    values = list(list.__iter__(x) if isinstance(x, list) else tuple.__iter__(x))
    if all(kind is str or not issubclass(kind, str) for kind in set(map(type, values))):   # (read at C speed)
        return values
    return [plain(v) for v in values]


def plain(value):
    """A text as a plain str (``str.__str__``: a str subclass's own __hash__, __eq__ or split may raise or lie);
    anything else as it is."""
    return str.__str__(value) if isinstance(value, str) else value


def class_name(cls):
    """A class's own name, read by type's own descriptor: a metaclass of the learner's could make
    ``cls.__name__`` raise, lie or never return."""
    try:
        return type.__dict__["__name__"].__get__(cls)
    except Exception:   # noqa: BLE001 (not a class after all)
        return "object"


def type_name(x):
    """The name of ``x``'s class (``class_name``): what a sentence says ``x`` is."""
    return class_name(type(x))


def is_bool(v):
    """Whether ``v`` is True or False, or an array or tensor of them (dtype bool)."""
    try:
        dtype = str(getattr(v, "dtype", ""))
    except Exception:   # noqa: BLE001 (a tensor subclass of the learner's may raise anything: left to its converter)
        return False
    return isinstance(v, (bool, np.bool_)) or dtype in ("bool", "torch.bool")


def refuse_bools(name):
    """The sentence for True/False where numbers are expected."""
    fail(f"{name} should hold numbers, but it holds True/False values (write 1.0 and 0.0 if you mean numbers)")


def message_of(error, limit=5_000):
    """An exception's message for a sentence, cut to ``limit`` characters; when its ``__str__`` fails
    (it may be a learner's class), a note saying so instead."""
    try:
        text = str(error)
    except Exception:   # noqa: BLE001
        return "(a message that could not be read)"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def has_bools(x, depth=0):
    """Whether a list or tuple (nested up to 4 deep) holds True or False, or an array or tensor of
    them, among its entries: torch and NumPy would silently read True as 1."""
    if not isinstance(x, (list, tuple)) or depth > 4:
        return False
    return any(is_bool(v) or isinstance(v, (list, tuple)) and has_bools(v, depth + 1) for v in x)


def check_ids_given(ids, name, most):
    """What must hold of token ids before anything converts them: not None or text, a range of at
    most ``most`` ids (a range is made lazily: converting range(10**12) would never end), no bool
    among a list's entries. Returns nothing; each converter then makes its tensor."""
    if ids is None or isinstance(ids, (str, bytes)):
        fail(f"{name} should be whole numbers (turn words into ids with tokenizer.encode), but got "
             f"{type(ids).__name__} {shown(ids)}")
    if isinstance(ids, range) and length(ids) > most:
        fail(f"{name} should hold at most {count(most)} ids, but got a range of {count(length(ids))}")
    if not isinstance(ids, (list, tuple, range, np.ndarray, np.generic, int)) and not is_tensor(ids) and \
            any(hasattr(type(ids), method) for method in ("__len__", "__iter__", "__getitem__")):
        fail(f"{name} should be a list, tuple, array or tensor of whole numbers, but got {type_name(ids)} "
             f"{shown(ids)}")   # (another sequence is walked in Python: one claiming 10**9 entries, for minutes)
    if isinstance(ids, (list, tuple)):   # counted before anything reads its entries
        check_numbers(nested_size(ids), name)
    if has_bools(ids):
        fail(f"{name} should be whole numbers, but got a bool (True or False) among them")
    if isinstance(ids, np.ma.MaskedArray) and np.ma.is_masked(ids):
        fail(f"{name} should be whole numbers, but got a masked array with hidden entries (its hidden ids would "
             "be read as they are)")


def check_tensor(x, name="the input", float8=False):
    """Refuse, before its data is touched, a torch tensor whose numbers cannot be read as one array of
    real numbers: nested, sparse (any layout but strided), quantized, on the meta device (it holds no
    data) or complex, of packed bits (``packed_bits``: torch.uint4, float4, bits8), or a tensor subclass
    that raises when these are read; a float8 tensor too (torch.float8_e4m3fn, ...: torch computes almost
    nothing in them, not even isfinite or min), unless ``float8`` (a caller that only reads the shape, or
    reads the numbers as float32 as ``to_numpy`` does). Return x."""
    kind = tensor_refusal(x, float8)
    if kind is not None:
        fail(f"{name} should be a dense tensor of real numbers in memory, but got {kind}")
    return x


def tensor_refusal(x, float8=False):
    """What ``check_tensor`` refuses the torch tensor ``x`` as, in a sentence's words ('a nested tensor (rows of
    different lengths)'), read without touching its data; None for a tensor it takes. For a caller whose own
    sentence says what it expected (a model, a batch of token ids) where such a tensor arrived."""
    try:
        return ("a nested tensor (rows of different lengths)" if getattr(x, "is_nested", False)
                else f"a tensor of layout {x.layout}" if str(x.layout) != "torch.strided"
                else f"a quantized tensor of dtype {x.dtype}" if x.is_quantized
                else "a tensor on the meta device, which holds no data" if x.device.type == "meta"
                else f"a tensor of complex numbers (dtype {x.dtype})" if x.is_complex()
                else f"a tensor of dtype {x.dtype}, packed bits which NumPy cannot read and torch computes nothing in"
                if packed_bits(x.dtype)
                else f"a tensor of dtype {x.dtype}, which torch computes almost nothing in (widen it first: x.float())"
                if not float8 and str(x.dtype).startswith("torch.float8") else None)
    except Exception as error:   # noqa: BLE001 (a tensor subclass of the learner's may raise anything)
        return f"a {type_name(x)} that raised {class_name(type(error))} when its layout and dtype were read"


def packed_bits(dtype):
    """Whether a torch dtype packs several numbers (or raw bits) into a byte: torch.uint1 to uint7, int1 to
    int7, float4_e2m1fn_x2, bits8, bits4x2, ...: no arithmetic is defined on them."""
    kind = str(dtype).replace("torch.", "")
    return kind.startswith(("bits", "float4")) or re.fullmatch(r"u?int[1-7]", kind) is not None


def check_tensor_size(x, name="the input", float8=False):
    """``check_tensor`` (``float8``: see there), then the tensor's numbers counted at 8 bytes each against
    MAX_BYTES before any op makes them: an expanded tensor (torch.zeros(1).expand(10**9)) stands for more
    numbers than it stores. Return x."""
    check_bytes(8 * check_tensor(x, name, float8).numel(), f"{name} (a tensor of {count(x.numel())} numbers)",
                "give a smaller tensor")
    return x


def entries(x, name="the input"):
    """How many numbers ``x`` stands for, read without converting it: a tensor's numel (an expanded one
    stores fewer), an array's size (a broadcast view too); 0 for anything else (a list, a number), which
    to_numpy counts as it converts it. For counting several inputs before any is copied."""
    if isinstance(x, np.ndarray):
        return x.size
    if is_tensor(x):
        return check_tensor(x, name, float8=True).numel()
    return 0


def shape_of(x, name="the input"):
    """The shape of a NumPy array or a torch tensor, read without converting it (a tensor checked and counted
    first, ``check_tensor_size``, as to_numpy would: a float8 one taken, as to_numpy reads it); None for
    anything else (a list, a number)."""
    if isinstance(x, np.ndarray):
        return x.shape
    if is_tensor(x):
        return tuple(check_tensor_size(x, name, float8=True).shape)
    return None


def shape_before_copy(x, name, ndim):
    """(x, its shape) for a call that counts its memory from the shape (``check_bytes``) before it copies ``x``: an
    array's or a tensor's shape read without converting it (``shape_of``), x left as it is; anything else (a
    list) converted first by ``as_array`` to a float array of ``ndim`` axes (``to_numpy`` counts that copy)."""
    shape = shape_of(x, name)
    if shape is None:
        x = as_array(x, name, ndim)
        shape = x.shape
    return x, tuple(shape)


def described(value, name="the input"):
    """An array's or a tensor's dtype and shape (read without converting it, as ``shape_of``); ``shown`` for
    anything else: what a sentence says arrived where an array was expected."""
    shape = shape_of(value, name)
    return shown(value) if shape is None else f"dtype {value.dtype} and shape {tuple(shape)}"


def check_finite(x, name, minus_inf=False):
    """Refuse an array or tensor ``x`` holding NaN or infinities (-inf too, unless ``minus_inf``:
    where a function documents it, such as a masked score) in one sentence; return x."""
    ok = np.isfinite(x) if isinstance(x, np.ndarray) else check_tensor(x, name).isfinite()   # (float8: refused)
    if minus_inf:
        ok = ok | (x == -np.inf)
    if not ok.all():
        bad, size = int((~ok).sum()), int(np.prod(ok.shape))
        fail(f"{name} should hold finite numbers{' (or -inf)' if minus_inf else ''}, but it holds NaN or "
             f"{'+inf' if minus_inf else 'inf'} in {count(bad)} of its {count(size)} entries")
    return x


def check_mask(mask, shape, name="mask"):
    """A mask for scores ending in ``shape`` (T_q, T_k), True where a key is hidden: True/False, or the
    numbers 1 (hide) and 0 (keep) only; returned as a NumPy bool array. Anything else (0.5, NaN, text,
    an additive mask of 0 and -inf) is refused in one sentence: read as truth values it would hide
    keys silently. Its shape is checked before it is converted (an array's or a tensor's, read as it is; a list's
    once ``to_numpy`` has counted and converted it), and its values read after."""
    given = shape_of(mask, name)
    if given is not None and given != tuple(shape):
        wrong_mask_shape(given, shape, name)
    mask = mask if type(mask) is np.ndarray and mask.dtype == bool else to_numpy(mask, name, bools=True)
    if mask.shape != tuple(shape):
        wrong_mask_shape(mask.shape, shape, name)
    odd = mask[(mask != 0) & (mask != 1)]
    if odd.size:
        fail(f"{name} should hold True/False (or 1 to hide and 0 to keep), but it holds {float(odd[0]):g}"
             + (" (an additive mask: add it to the scores instead)" if odd[0] == -np.inf else ""))
    return mask == 1


def wrong_mask_shape(given, shape, name):
    """The sentence for a mask of shape ``given`` where the scores end in ``shape``."""
    fail(f"the {name} should have the shape the scores end in, {tuple(shape)}, but it has shape {tuple(given)}")


def as_array(x, name, ndim=None):
    """Return ``x`` as a float NumPy array (``to_numpy``), checking its number of axes.

    ndim: an int or a tuple of allowed ints, or None for any.
    """
    arr = to_numpy(x, name)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            want = " or ".join(f"{n}-D" for n in allowed)
            fail(f"{name} should be {want}, but it has shape {arr.shape}")
    return arr


def whole(value, name, expected):
    """An int or NumPy integer (not a bool) as a plain int, read by int's own method: a subclass's
    ``__int__``, ``__index__`` or ``__lt__`` may raise or lie. Else one sentence: ``name`` should be
    ``expected``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        fail(f"{name} should be {expected}, but got {shown(value)}")
    try:
        return int.__index__(value) if isinstance(value, int) else int(value)
    except Exception:   # noqa: BLE001 (a NumPy integer subclass of the learner's may raise anything)
        fail(f"{name} should be {expected}, but got a {type(value).__name__} that cannot be read as one")


def check_positive_int(value, name, minimum=1):
    """Check that ``value`` is an integer >= ``minimum`` (a NumPy integer counts); return it as int."""
    value = whole(value, name, f"a whole number >= {minimum}")
    if value < minimum:
        fail(f"{name} should be at least {minimum}, but got {shown(value)}")
    return value


MAX_WIDTH = 2**20   # the widest layer a count takes (d_model, d_ff): sums of products of such widths stay exact in float64


def check_size(value, name, most):
    """A size (a head count, a token count, a width): a whole number (not a bool) from 1 to ``most``;
    return it as int."""
    value = check_positive_int(value, name)
    if value > most:
        fail(f"{name} should be at most {count(most)} (this course's limit), but got {count(value)}")
    return value


# The largest seed every generator the course seeds keeps whole: torch's CPU generator takes seeds up to 2**64 - 1
# but keeps only their low 32 bits (seed s + 2**32 draws what seed s draws), NumPy's RandomState, scikit-learn,
# UMAP and gensim refuse more; NumPy's default_rng and Python's random keep any size.
MAX_SEED = 2**32 - 1


def check_seed(seed, name="seed"):
    """A random seed: a whole number from 0 to MAX_SEED, 2**32 - 1 (a NumPy integer counts); return it as int."""
    seed = check_positive_int(seed, name, minimum=0)
    if seed > MAX_SEED:
        fail(f"{name} should be a whole number from 0 to 2**32 - 1 (torch takes seeds from 0 to 2**64 - 1 but keeps "
             f"only their low 32 bits, so a larger one would repeat a smaller one's draws), but got {shown(seed)}")
    return seed


def check_seeds(seed, n, what):
    """The seeds seed, seed + 1, ..., seed + n - 1 of ``n`` rows (a checked count, 0 or more), each ``what``
    ('sample') drawn with its own generator: ``seed`` read first (``check_seed``: a NumPy seed becomes a Python
    int, so the sum cannot wrap), then the last seed checked; return seed as int."""
    seed = check_seed(seed)
    if n:
        check_seed(seed + n - 1, f"seed + n - 1 (the last {what}'s seed)")
    return seed


def next_seed(seed):
    """The seed after ``seed`` (a checked seed), from MAX_SEED round to 0: a second generator's seed."""
    return (seed + 1) % (MAX_SEED + 1)


def check_switch(value, name):
    """A switch: True or False (a NumPy bool counts, e.g. from a comparison); return it as bool.
    The text 'False', 0, 1, 0.5 and None are refused: each would silently count as one or the other."""
    if not isinstance(value, (bool, np.bool_)):
        fail(f"{name} is a switch and should be True or False, but got {shown(value)}")
    return bool(value)


def check_choice(value, name, allowed):
    """One of the texts in ``allowed``; return it."""
    if type(value) is not str or value not in allowed:
        fail(f"{name} should be one of {', '.join(map(repr, allowed))}, but got {shown(value)}")
    return value


def shown(value):
    """A value as a sentence shows it: its repr cut to 40 characters (never a 10 MB text or a deep list)."""
    if isinstance(value, np.ndarray):
        return f"a {type(value).__name__} of shape {value.shape}"
    if isinstance(value, BUILT_IN_SIZED) and length(value) > 40:   # (a subclass's __len__ may lie or raise)
        return f"a {type(value).__name__} of length {length(value)}"
    if type(value) is int and value.bit_length() > 128:
        return f"an integer of {value.bit_length():,} bits"
    if is_tensor(value):   # a torch tensor: its repr spans lines
        try:
            return f"a tensor of shape {tuple(value.shape)}"
        except Exception:   # noqa: BLE001 (a nested tensor has no one shape; a subclass may raise anything)
            return f"a {type_name(value)}"
    try:
        text = repr(value).replace("\n", " ")   # one line, whatever the repr
    except Exception:   # noqa: BLE001 (a repr of the learner's may raise anything)
        text = f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def real_number(value, name, expected="a number"):
    """``value`` (an int, float or NumPy number, not a bool) as a Python float, read in one place for every
    check: NaN and inf are kept (the caller decides), -0.0 is 0.0 (a bound of 0 then holds, and NumPy's
    uniform(0, -0.0) refuses). A finite number past float64's range (a whole number of 1,100 bits, a long
    double of 1e400), which float() would make inf, is refused naming what arrived; so is a subclass of the
    learner's whose ``__float__`` raises. ``expected``: what ``name`` should be, for the sentence."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        fail(f"{name} should be {expected}, but got {shown(value)}")
    try:
        with np.errstate(over="ignore"):   # a long double past float64's range becomes inf: said below
            number = float(value)
        finite = isinstance(value, int) or bool(np.isfinite(value))   # (a long double's own finiteness)
    except OverflowError:
        number, finite = math.inf, True
    except Exception:   # noqa: BLE001 (a subclass of the learner's whose __float__ raises anything)
        fail(f"{name} should be {expected}, but got a {type_name(value)} that cannot be read as a number")
    if finite and not math.isfinite(number):
        fail(f"{name} should be {expected} that a float can hold (at most about 1.8e308 in size), "
             f"but got {shown(value)}")
    return number + 0.0   # -0.0 + 0.0 is 0.0


def number_range(low=None, high=None, low_open=False):
    """What check_number's bounds ask for, as a sentence says it: 'a number > 1', 'a number from 0 to 1'."""
    above = None if low is None else f"{'>' if low_open else '>='} {low:g}"
    if high is None:
        return "a number" if above is None else f"a number {above}"
    return f"a number at most {high:g}" if above is None else f"a number {above} and at most {high:g}"


def check_number(value, name, low=None, high=None, low_open=False):
    """A finite real number within [low, high] (or (low, high] with low_open); return it as float (-0.0 as 0.0).
    A number past float64's range or one that cannot be read is refused by ``real_number``, naming the range."""
    value = real_number(value, name, number_range(low, high, low_open))
    if not np.isfinite(value):
        fail(f"{name} should be a finite number, but got {value}")
    if low is not None and (value <= low if low_open else value < low):
        fail(f"{name} should be {'>' if low_open else '>='} {low:g}, but got {value:g}")
    if high is not None and value > high:
        fail(f"{name} should be at most {high:g}, but got {value:g}")
    return value


MAX_BYTES = 3 * 2**29   # 1.5 GiB: the most one call may allocate (Binder gives 2 GB in all)


def check_bytes(need, what, advice, limit=MAX_BYTES):
    """Refuse up front a call that would need more than ``limit`` bytes (``need``: an estimate from
    the sizes alone, made before anything is allocated); ``advice`` says what to ask for instead."""
    if need > limit:
        fail(f"{what} should need at most {gib(limit)} (this course's limit), but would need "
             f"{about_gib(need, limit)}: {advice}")


def gib(size, digits=1):
    """A number of bytes as a sentence shows it, in GiB with ``digits`` decimals: '1.5 GiB' (a limit), '0.34 GiB'
    (a model's weights, with digits=2)."""
    return f"{size / 2**30:,.{digits}f} GiB"


def about_gib(need, limit):
    """What a memory refusal says a call would need: ``need`` bytes (more than ``limit``) in GiB, rounded
    up, with as many decimals as it takes to read larger than ``gib(limit)``: 'about 1.6 GiB', or
    'about 1.50002 GiB' just past 1.5 GiB; 'more than any machine holds' past 2**80 bytes."""
    if need >= 2**80:
        return "more than any machine holds"
    shown_limit = round(limit / 2**30, 1)   # as gib(limit) shows it
    digits = 1
    while digits < 12 and round(need / 2**30, digits) <= shown_limit:
        digits += 1
    rounded_up = math.ceil(need / 2**30 * 10**digits) / 10**digits
    return f"about {rounded_up:,.{digits}f} GiB"


def count(n):
    """A whole number as a sentence shows it: with thousands separators, or cut short when huge."""
    return f"{n:,}" if abs(n) < 10**30 else shown(n)   # (30 digits: a sentence still reads it)


def check_text(text, name="the text", empty=False, max_chars=None):
    """A string (non-blank unless ``empty``; at most ``max_chars`` characters) that UTF-8 can write:
    a lone surrogate (half of a pair, e.g. '\\ud800') is refused with its position; return it."""
    if not isinstance(text, str):
        fail(f"{name} should be a string, but got {type(text).__name__} {shown(text)}")
    text = plain(text)   # a subclass's strip, split or encode may raise or lie
    if not empty and not text.strip():
        fail(f"{name} should be a non-empty string, but got {shown(text)}")
    if max_chars is not None and len(text) > max_chars:
        fail(f"{name} should have at most {max_chars:,} characters, but has {len(text):,}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        fail(f"{name} should hold only characters UTF-8 can write, but character {error.start} is a lone surrogate "
             f"{text[error.start]!r} (half of a pair, no character on its own)")
    return text


def check_index(value, name, size, negative=False):
    """An index into ``size`` things: a whole number (not a bool) from 0 (from -size with
    ``negative``, Python's count from the end) to size - 1; return it as int."""
    low = -size if negative else 0
    expected = f"a whole number from {low} to {size - 1}"
    number = whole(value, name, expected)
    if not low <= number < size:
        fail(f"{name} should be {expected}, but got {shown(value)}")
    return number


class Wrong(Exception):
    """The answer cannot be judged further; the message is one sentence for the learner."""


def answer_shape(value, name):
    """The shape of a learner's answer ``value`` (an array or a tensor), read without converting or copying it
    (``shape_of``), so that a check refuses a wrong shape before it spends memory on the answer (an expanded
    view stands for more numbers than it stores); None for a list or anything else. A tensor that
    ``check_tensor_size`` refuses raises Wrong with its sentence."""
    try:
        return shape_of(value, name)
    except CourseInputError as error:
        raise Wrong(message_of(error)) from None


def read_shape(x, name, answer=False):
    """A tensor's shape read as ``shape_of`` reads it (a nested tensor, which has no one shape, refused in its one
    sentence; with ``answer``, a learner's answer, as ``answer_shape`` reads it: Wrong with that sentence), anything
    else's ``.shape`` (None without one: a list, a number)."""
    if is_tensor(x):
        return answer_shape(x, name) if answer else shape_of(x, name)
    return getattr(x, "shape", None)


def check_answer_shape(value, name, shape):
    """Raise Wrong in one sentence when the answer ``value`` (an array or a tensor) has another shape than
    ``shape``, read before it is converted (``answer_shape``); a list is left to the conversion's own check."""
    given = answer_shape(value, name)
    if given is not None and given != tuple(shape):
        raise Wrong(f"{name} should have shape {tuple(shape)}, but it has shape {given}")
