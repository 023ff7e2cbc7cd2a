"""Evaluations of language models: the shared needle-in-a-haystack basics (`needles`),
passkey retrieval (`passkey`), the long-context suite (`suite_examples`, `suite`), loss over
whole documents with the state carried (`long_documents`) and lm-evaluation-harness
(`harness`, needs the `lm-eval` extra)."""
