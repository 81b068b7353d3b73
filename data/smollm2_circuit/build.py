"""Chapter 11's circuit measurements on SmolLM2-135M-Instruct, at full size, once.

    python data/smollm2_circuit/build.py induction     # -> induction.json  (about 20 minutes on one thread)
    python data/smollm2_circuit/build.py facts         # -> facts.json      (path patching, factual recall, the rounding)
    python data/smollm2_circuit/build.py backup        # added later, merged into both files: the backup test, the
                                                       # previous-token head taken out of queries and keys together
    python data/smollm2_circuit/build.py previous_alone  # added later: the best previous-token head mean-ablated alone
    python data/smollm2_circuit/build.py later_checks  # added later, merged into both files: the backup test on
                                                       # attention, direct logit attribution over the 64 fact pairs
    python data/smollm2_circuit/build.py more_rounding # added later: the second rounding with seeds 2-4 too
    python data/smollm2_circuit/build.py --quick       # recompute the first rows only and compare (tests/test_real.py)

Every number comes from ``helpers.real.circuit`` on the installed GGUF file (its sha256 is
recorded), one CPU thread, seeded draws; each JSON file holds its provenance (the file's hash,
the seeds, torch's version, the wall time) and the chapter reads it. The chapter recomputes a
small subset of these numbers live with the same functions and prints how well they agree.
"""
import json
import os
import sys
import time

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from helpers.real import circuit, smollm2  # noqa: E402
from helpers.real import compute as real  # noqa: E402

N_SEQUENCES, LENGTH, SEED = 100, 10, 0      # induction: 100 random sequences of 10 tokens, written twice
CHUNK = 25
K_SETS = (3, 10)                           # the best k induction heads mean-ablated together
N_CONTROLS = 10                            # random sets of k heads for each k (seeds 0..9)
RECEIVERS, SENDERS = 3, 3                  # path patching: the best 3 induction heads x the best 3 previous-token heads
CAPITALS = circuit.CAPITALS
PAIR_SEEDS = (0, 1)                        # two seeded derangements of the countries the model knows
MAX_PAIRS = 64
ROUNDING_SEEDS = (0, 1, 2, 3, 4)            # the second rounding's draws (the first build: 0 and 1)
QUICK = 4                                  # --quick: the first 4 sequences and pairs


def r(x, digits=4):
    """Floats rounded for the JSON file (lists of lists too)."""
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        return [r(v, digits) for v in x]
    return round(float(x), digits)


def provenance(seconds, **seeds):
    return dict(gguf=smollm2.FILENAME, gguf_sha256=smollm2.file_sha256(smollm2.gguf_path()),
                torch=torch.__version__, threads=torch.get_num_threads(), seeds=seeds,
                wall_seconds=round(seconds, 1), made_by="python data/smollm2_circuit/build.py")


def sequences(model, n=N_SEQUENCES):
    return circuit.random_repeats(n, LENGTH, model.cfg.vocab_size, SEED)


def induction(model):
    start = time.time()
    ids = sequences(model)
    stats = circuit.head_statistics(model, ids, CHUNK)
    ind, prev = stats["induction"].mean(0), stats["previous"].mean(0)
    base = circuit.copy_loss(model, ids, chunk=CHUNK)
    first_copy = circuit.copy_loss(model, ids, chunk=CHUNK, copy=1)
    best10 = real.best_heads(ind, 10)
    sets = {}
    for k in K_SETS:
        best = best10[:k]
        controls = [circuit.random_heads(model.cfg, k, avoid=best10, seed=s) for s in range(N_CONTROLS)]
        sets[k] = dict(heads=best, loss=r(circuit.copy_loss(model, ids, best, stats["means"], CHUNK)),
                       controls=controls,
                       control_losses=[r(circuit.copy_loss(model, ids, c, stats["means"], CHUNK).mean())
                                       for c in controls])
        print(f"k={k}: best {sets[k]['loss'][:4]}, controls {sets[k]['control_losses']}", flush=True)
    singles = {f"L{l}H{h}": r(circuit.copy_loss(model, ids, [(l, h)], stats["means"], CHUNK).mean())
               for l, h in best10[:5]}
    kept = best10 + [hd for hd in real.best_heads(prev, SENDERS) if hd not in best10]
    save_file({f"L{l}H{h}": stats["means"][l][h].contiguous() for l, h in kept},
              os.path.join(HERE, "means.safetensors"))
    out = dict(n_sequences=N_SEQUENCES, length=LENGTH, induction=r(ind), previous=r(prev),
               induction_spread=r(stats["induction"].std(0)), previous_spread=r(stats["previous"].std(0)),
               clean_loss=r(base), first_copy_loss=r(first_copy), sets=sets, singles=singles,
               first_rows=first_rows(model, ids[:QUICK], stats, base))
    out["provenance"] = provenance(time.time() - start, sequences=SEED, controls=list(range(N_CONTROLS)))
    return out


def first_rows(model, ids, stats=None, base=None):
    """Per-sequence numbers that do not depend on the other sequences: the first rows the
    --quick run recomputes."""
    if stats is None:
        stats = circuit.head_statistics(model, ids, CHUNK)
        base = circuit.copy_loss(model, ids, chunk=CHUNK)
    n = len(ids)
    return dict(induction=r(stats["induction"][:n]), previous=r(stats["previous"][:n]), loss=r(base[:n]))


def known_countries(model, tok):
    """The countries whose capital's first token is the model's top next token after the template."""
    known, first = [], {}
    for country, capital in CAPITALS.items():
        ids = torch.tensor(tok.encode(circuit.TEMPLATE.format(country)))
        answer = tok.encode(" " + capital)[0]
        with torch.no_grad():
            if int(model(ids)[-1].argmax()) == answer:
                known.append(country)
        first[country] = answer
    return known, first


def country_pairs(known, first):
    pairs = []
    for seed in PAIR_SEEDS:
        g = torch.Generator().manual_seed(seed)
        while True:
            order = torch.randperm(len(known), generator=g).tolist()
            if all(i != j for i, j in enumerate(order)):
                break
        pairs += [(known[i], known[j]) for i, j in enumerate(order)
                  if first[known[i]] != first[known[j]] and (known[i], known[j]) not in pairs]
    return pairs


def rerounded_run(model, steps, seed, ids, base_ind, base_loss, clean, answers, base_logits):
    """The model rounded a second time (seeded), measured again: the best induction scores, the
    second-copy loss, and the fact prompts' top token, logit difference and distribution."""
    other = circuit.rerounded(model, steps, seed)
    o_ind = circuit.head_statistics(other, ids, CHUNK)["induction"].mean(0)
    with torch.no_grad():
        logits = other.unembed(circuit.streams(other, clean)[-1][:, -1])
    run = dict(
        seed=seed,
        induction_top10=[[l, h, r(base_ind[l, h]), r(o_ind[l, h])] for l, h in real.best_heads(base_ind, 10)],
        induction_max_change=r((o_ind - base_ind).abs().max()),
        copy_loss=[r(base_loss), r(circuit.copy_loss(other, ids, chunk=CHUNK).mean())],
        fact_top1_same=int((logits.argmax(-1) == base_logits.argmax(-1)).sum()), fact_prompts=len(clean),
        fact_logit_diff=[r(circuit.logit_difference(base_logits, answers).mean()),
                         r(circuit.logit_difference(logits, answers).mean())],
        fact_logit_max_change=r((logits - base_logits).abs().max()),
        fact_kl=r(torch.nn.functional.kl_div(logits.log_softmax(-1), base_logits.log_softmax(-1),
                                             log_target=True, reduction="batchmean")))
    print("rerounded", run, flush=True)
    return run


def more_rounding(model, tok):
    """Added later, merged into facts.json (the rest is not rebuilt): the second rounding with
    seeds 2-4 beside the first build's 0 and 1, so that its effect is read over five draws."""
    start, path = time.time(), os.path.join(HERE, "facts.json")
    out = json.load(open(path))
    ids = sequences(model)
    base_ind = circuit.head_statistics(model, ids, CHUNK)["induction"].mean(0)
    base_loss = circuit.copy_loss(model, ids, chunk=CHUNK).mean()
    clean, _, answers = circuit.fact_batch(tok, [tuple(p) for p in out["fact"]["pairs"]], CAPITALS)
    with torch.no_grad():
        base_logits = model.unembed(circuit.streams(model, clean)[-1][:, -1])
    steps = circuit.block_steps(smollm2.read(), model)
    done = {run["seed"] for run in out["rounding"]["rerounded"]}
    for seed in ROUNDING_SEEDS:
        if seed not in done:
            out["rounding"]["rerounded"].append(rerounded_run(model, steps, seed, ids, base_ind, base_loss, clean,
                                                              answers, base_logits))
    out["provenance"]["rerounding"] = [run["seed"] for run in out["rounding"]["rerounded"]]
    out["provenance"]["more_rounding_seconds"] = round(time.time() - start, 1)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


def facts(model, tok):
    start = time.time()
    # path patching: the best previous-token heads into the best induction heads
    ids = sequences(model)
    stats = circuit.head_statistics(model, ids, CHUNK)
    ind, prev = stats["induction"].mean(0), stats["previous"].mean(0)
    receivers = real.best_heads(ind, RECEIVERS)
    senders = real.best_heads(prev, SENDERS)
    paths = []
    for receiver in receivers:
        clean = circuit.receiver_scores(model, ids, receiver, chunk=CHUNK)
        for sender in senders:
            if sender[0] >= receiver[0]:
                continue
            row = dict(sender=sender, receiver=receiver, clean=r(clean))
            for via in ("all", "q", "k"):
                row[via] = r(circuit.receiver_scores(model, ids, receiver, sender, stats["means"], via, CHUNK))
            paths.append(row)
            print("path", sender, receiver, {k: sum(v) / len(v) for k, v in row.items() if k in ("clean", "all", "q", "k")}, flush=True)
    t_paths = time.time() - start

    # factual recall, patched per layer and position, both directions
    known, first = known_countries(model, tok)
    pairs = country_pairs(known, first)[:MAX_PAIRS]
    clean, corrupt, answers = circuit.fact_batch(tok, pairs, CAPITALS)
    differ = [p for p in range(clean.shape[1]) if not torch.equal(clean[:, p], corrupt[:, p])]
    grids = {}
    for direction in ("denoise", "noise"):
        grid = circuit.patch_grid(model, clean, corrupt, answers, positions=range(differ[0], clean.shape[1]),
                                  direction=direction)
        grids[direction] = dict(positions=grid["positions"], normalised=r(grid["normalised"].T),
                                clean=r(grid["clean"].mean()), corrupt=r(grid["corrupt"].mean()),
                                first_pairs=r(grid["patched"][..., :QUICK].permute(2, 1, 0)))
        print(direction, "done", flush=True)
    fact = dict(template=circuit.TEMPLATE, candidates=len(CAPITALS), known=known, pairs=pairs,
                pieces=tok.pieces(clean[0].tolist()), first_differing_position=differ[0],
                clean_per_pair=r(grid["clean"]), corrupt_per_pair=r(grid["corrupt"]), grids=grids)

    # the 4-bit rounding
    steps = circuit.block_steps(smollm2.read(), model)
    sizes = circuit.rounding_sizes(model, steps)
    rounding = dict(per_matrix={name: r(v, 6) for name, v in sizes.items()}, rerounded=[])
    base_loss = circuit.copy_loss(model, ids, chunk=CHUNK).mean()
    with torch.no_grad():
        base_logits = model.unembed(circuit.streams(model, clean)[-1][:, -1])
    for seed in ROUNDING_SEEDS[:2]:
        rounding["rerounded"].append(rerounded_run(model, steps, seed, ids, ind, base_loss, clean, answers,
                                                   base_logits))
    out = dict(paths=paths, fact=fact, rounding=rounding, path_seconds=round(t_paths, 1))
    out["provenance"] = provenance(time.time() - start, sequences=SEED, pair_derangements=list(PAIR_SEEDS),
                                   rerounding=list(ROUNDING_SEEDS[:2]))
    return out


def quick(model, tok):
    """Recompute the first rows of both files and return the largest differences."""
    shipped = json.load(open(os.path.join(HERE, "induction.json")))
    mine = first_rows(model, sequences(model)[:QUICK])
    gaps = {key: max(abs(a - b) for x, y in zip(mine[key], shipped["first_rows"][key])
                     for a, b in zip(_flat(x), _flat(y))) for key in mine}
    fact = json.load(open(os.path.join(HERE, "facts.json")))["fact"]
    pairs = [tuple(p) for p in fact["pairs"][:QUICK]]
    clean, corrupt, answers = circuit.fact_batch(tok, pairs, CAPITALS)
    last = model.cfg.n_layers - 1
    for name, batch in (("clean_per_pair", clean), ("corrupt_per_pair", corrupt)):
        d = circuit.logit_difference(circuit.run_from(model, circuit.streams(model, batch)[last], last), answers)
        gaps[name] = max(abs(a - b) for a, b in zip(r(d), fact[name][:QUICK]))
    return gaps


def backup(model):
    """Added after the first two parts, merged into them (they are not rebuilt): the backup test
    (each head's direct contribution to the right next token's logit on the second copy, with
    nothing off, with each of the best 3 induction heads mean-ablated alone and with the 3
    together; a head whose contribution grows when another is off is a backup head), and the best
    previous-token head taken out of each best induction head's queries and keys together."""
    start = time.time()
    ids = sequences(model)
    ind_path, facts_path = os.path.join(HERE, "induction.json"), os.path.join(HERE, "facts.json")
    ind, facts_out = json.load(open(ind_path)), json.load(open(facts_path))
    means = circuit.shipped_means()
    best3 = [tuple(hd) for hd in ind["sets"]["3"]["heads"]]
    conditions = dict(none=[], **{f"L{l}H{h}": [(l, h)] for l, h in best3}, best3=best3)
    runs = {}
    for label, off in conditions.items():
        got = circuit.copy_effects(model, ids, off, means, CHUNK)
        runs[label] = dict(heads=off, loss=r(got["loss"].mean()), direct=r(got["direct"].mean(0)),
                           direct_spread=r(got["direct"].std(0)))
        if label == "best3":
            runs[label]["first_rows"] = r(got["direct"][:QUICK])
        print("backup", label, runs[label]["loss"], flush=True)
    ind["backup"] = runs
    ind["provenance"]["backup_seconds"] = round(time.time() - start, 1)
    for row in facts_out["paths"]:
        if tuple(row["sender"]) == real.best_heads(torch.tensor(ind["previous"]))[0]:
            row["qk"] = r(circuit.receiver_scores(model, ids, tuple(row["receiver"]), tuple(row["sender"]), means,
                                                  "qk", CHUNK))
            print("path qk", row["sender"], row["receiver"], sum(row["qk"]) / len(row["qk"]), flush=True)
    facts_out["provenance"]["qk_seconds"] = round(time.time() - start - ind["provenance"]["backup_seconds"], 1)
    for path, out in ((ind_path, ind), (facts_path, facts_out)):
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


def later_checks(model, tok):
    """Added after the other parts, merged into them (they are not rebuilt): the backup test on
    attention (every head's induction score with nothing off, with each of the best 3 induction
    heads mean-ablated alone and with the 3 together; a head whose score rises has taken over the
    removed one's attention), and direct logit attribution over the 64 fact pairs (each part's
    direct share of logit(answer) - logit(foil) at the last position, each prompt's own divisor)."""
    start = time.time()
    ind_path, facts_path = os.path.join(HERE, "induction.json"), os.path.join(HERE, "facts.json")
    ind, facts_out = json.load(open(ind_path)), json.load(open(facts_path))
    ids, means = sequences(model), circuit.shipped_means()
    best3 = [tuple(hd) for hd in ind["sets"]["3"]["heads"]]
    conditions = dict(none=[], **{f"L{l}H{h}": [(l, h)] for l, h in best3}, best3=best3)
    runs = {}
    for label, off in conditions.items():
        scores = circuit.induction_scores(model, ids, off, means, CHUNK)
        runs[label] = dict(heads=off, induction=r(scores.mean(0)))
        if label == "best3":
            runs[label]["first_rows"] = r(scores[:QUICK])
        print("backup on attention", label, flush=True)
    ind["backup_attention"] = runs
    ind["provenance"]["backup_attention_seconds"] = round(time.time() - start, 1)
    fact = facts_out["fact"]
    clean, _, answers = circuit.fact_batch(tok, [tuple(p) for p in fact["pairs"]], CAPITALS)
    shares = circuit.pair_shares(model, clean, answers)                 # {part: (64,)}
    table = torch.stack(list(shares.values()))                          # (parts, 64)
    heads = [i for i, name in enumerate(shares) if "H" in name]
    top = [list(shares)[heads[int(i)]] for i in table[heads].argmax(0)]  # the largest head share, per pair
    fact["direct_pairs"] = dict(parts=list(shares), mean=r(table.mean(1)), low=r(table.min(1).values),
                                high=r(table.max(1).values), top_head=top, first_rows=r(table[:, :QUICK].T),
                                seconds=round(time.time() - start - ind["provenance"]["backup_attention_seconds"], 1))
    print("direct over pairs", fact["direct_pairs"]["seconds"], "s", flush=True)
    for path, out in ((ind_path, ind), (facts_path, facts_out)):
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


def _flat(x):
    return [v for row in x for v in _flat(row)] if isinstance(x, list) else [x]


def main(argv):
    torch.set_num_threads(1)
    model, tok = real.load()
    if "--quick" in argv:
        print(json.dumps(quick(model, tok)))
        return
    if "backup" in argv:          # added after the first build: merged into induction.json and facts.json
        backup(model)
        return
    if "more_rounding" in argv:   # added after the first build: seeds 2-4 of the second rounding
        more_rounding(model, tok)
        return
    if "later_checks" in argv:    # added after the first build: merged into induction.json and facts.json
        later_checks(model, tok)
        return
    if "previous_alone" in argv:  # added after the first build: the best previous-token head alone, on the loss
        start, path = time.time(), os.path.join(HERE, "induction.json")
        out = json.load(open(path))
        sender = real.best_heads(torch.tensor(out["previous"]))[0]
        out["previous_single"] = {f"L{sender[0]}H{sender[1]}": r(circuit.copy_loss(
            model, sequences(model), [sender], circuit.shipped_means(), CHUNK).mean())}
        out["provenance"]["previous_single_seconds"] = round(time.time() - start, 1)
        print("previous_alone", out["previous_single"], flush=True)
        json.dump(out, open(path, "w"), indent=1)
        return
    if "first_copy" in argv:      # added after the first build: the first copy's loss, merged into induction.json
        start, path = time.time(), os.path.join(HERE, "induction.json")
        out = json.load(open(path))
        out["first_copy_loss"] = r(circuit.copy_loss(model, sequences(model), chunk=CHUNK, copy=1))
        out["provenance"]["first_copy_seconds"] = round(time.time() - start, 1)
        json.dump(out, open(path, "w"), indent=1)
        return
    for part in [a for a in argv if not a.startswith("-")] or ["induction", "facts"]:
        out = induction(model) if part == "induction" else facts(model, tok)
        with open(os.path.join(HERE, f"{part}.json"), "w") as f:
            json.dump(out, f, indent=1)
        print(part, "written in", out["provenance"]["wall_seconds"], "s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
