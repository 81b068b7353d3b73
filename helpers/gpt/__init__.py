"""Chapter 12, the capstone: Tiny Shakespeare, its tokenizers, the course's training loop and the shipped model."""
