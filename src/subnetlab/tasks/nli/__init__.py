"""NLI and paraphrase data: MNLI / HANS / QQP / PAWS files, the HANS-style generator, the synthetic corpus."""
