"""Rebuild the shipped Tiny Shakespeare models: python data/build_shakespeare.py [--tokens bpe] [--steps N]

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

--tokens bpe builds the same model on byte-level BPE tokens instead (helpers.gpt.shipped.BPE_CONFIG
and BPE_TRAINING; 1,024 tokens trained on the training text with Hugging Face tokenizers) and
writes data/shakespeare/bpe_model.*, bpe_train_log.json and the tokenizer, bpe_tokenizer.json; its
final loss over the whole validation text is also given in nats per character.
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
    parser.add_argument("--tokens", choices=sorted(shipped.TOKENS), default="characters", help="which model")
    args = parser.parse_args()
    model, log = shipped.build(stop_after=args.steps, tokens=args.tokens)
    final = log["evaluations"][-1]
    print(f"wall time {log['wall_seconds']:.0f} s, {log['tokens_per_second']:,} tokens per second "
          f"({log['training_tokens_per_second']:,} in the training steps alone), final training loss "
          f"{final['train_loss']:.4f}, validation loss {final['val_loss']:.4f}, load average "
          f"{log['load_average_start'][0]:.2f} at the start and {log['load_average_end'][0]:.2f} at the end, "
          f"peak memory {log['peak_memory_mib']} MiB")
    if args.steps is not None:
        return
    print(f"validation loss over the whole validation text: {log['whole_validation_loss']:.4f} nats per token, "
          f"{log['whole_validation_loss_per_character']:.4f} per character")
    stem, log_name, _, _ = shipped.TOKENS[args.tokens]
    card = {k: log[k] for k in ("tokenizer", "recipe", "init", "wall_seconds", "tokens_per_second", "load_average_start",
                                "load_average_end", "peak_memory_mib", "built_with", "whole_validation_loss",
                                "whole_validation_loss_per_character")}
    card.update(final_train_loss=final["train_loss"], final_val_loss=final["val_loss"],
                log=log_name, parameters=model.parameter_count())
    save(model, HERE / stem, card, shipped=True)
    (HERE / log_name).write_text(json.dumps(log, indent=1) + "\n")
    if args.tokens == "bpe":
        (HERE / "bpe_tokenizer.json").write_text(shipped.train_tokenizer().bpe.to_str() + "\n")


if __name__ == "__main__":
    main()
