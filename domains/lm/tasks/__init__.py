"""The training tasks of the language-model domain: `lm` (next-token prediction on text),
`lm_passkey` (passkey retrieval) and `lm_suite` (the long-context suite), each registered
through the `titans_seq.tasks` entry points."""
