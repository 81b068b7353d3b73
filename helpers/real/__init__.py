"""Chapter 11, a real model: SmolLM2-135M-Instruct run by the course's own Transformer.

smollm2.py finds, reads and dequantises the GGUF file and builds the tokenizer; compute.py holds
the chapter's functions (and the short real-model views of chapters 05-10); checks.py the exercise
checks; explorer.py the widget (a prompt, a layer, a head: its attention and the top next tokens).
"""
