"""Rebuild the shipped Tiny Shakespeare model: python data/build_shakespeare.py [--steps N]

Trains the course's Transformer (configured as helpers.gpt.shipped.CONFIG, from init="small",
seeded) on the first 90 % of data/shakespeare/tinyshakespeare.txt, character by character, with
the course's loop (helpers.gpt.train.train, the recipe helpers.gpt.shipped.TRAINING, 2 CPU
threads), and writes data/shakespeare/model.safetensors and model.json (config and model card)
and data/shakespeare/train_log.json: every evaluation (training and validation loss on fixed
windows, the learning rate, the wall time, tokens per second), every step's batch loss, every
head's induction score and the losses on the two copies of repeated random characters every 100
steps, the final loss over the whole validation text, the load average at the start and the end,
the peak memory. Prints its wall time and tokens per second. --steps N runs only the first N
steps of the same run and writes nothing.
"""
import argparse
import json
import os
from pathlib import Path

# Before torch loads: threads that wait for work sleep instead of spinning. On a machine shared with
# other work, spinning threads of one run hold up each other (measured here under load: 4x slower).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from helpers.gpt import shipped  # noqa: E402
from helpers.weights import save  # noqa: E402

HERE = Path(__file__).resolve().parent / "shakespeare"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="only the first N steps; writes nothing")
    args = parser.parse_args()
    model, log = shipped.build(stop_after=args.steps)
    final = log["evaluations"][-1]
    print(f"wall time {log['wall_seconds']:.0f} s, {log['tokens_per_second']:,} tokens per second "
          f"({log['training_tokens_per_second']:,} in the training steps alone), final training loss "
          f"{final['train_loss']:.4f}, validation loss {final['val_loss']:.4f}, load average "
          f"{log['load_average_start'][0]:.2f} at the start and {log['load_average_end'][0]:.2f} at the end, "
          f"peak memory {log['peak_memory_mib']} MiB")
    if args.steps is not None:
        return
    print(f"validation loss over the whole validation text: {log['whole_validation_loss']:.4f}")
    card = {k: log[k] for k in ("recipe", "init", "wall_seconds", "tokens_per_second", "load_average_start",
                                "load_average_end", "peak_memory_mib", "built_with", "whole_validation_loss")}
    card.update(final_train_loss=final["train_loss"], final_val_loss=final["val_loss"],
                log="train_log.json", parameters=model.parameter_count())
    save(model, HERE / "model", card)
    (HERE / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")


if __name__ == "__main__":
    main()
