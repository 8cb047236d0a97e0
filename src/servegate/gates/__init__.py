"""The gates, one package each (`startup`, `numerics`, `embeddings`, `golden`, `context`,
`performance`: `plan`, `collect`, `judgement`), and the machinery they share beside them:
`pair` (both sides and how they are asked), `evidence` (curl reproducers, excerpts),
`capabilities` (what each side offers), `sizing` (context discovery), `tokens` (token and
logprob comparison). `servegate.orchestration.gate_sequence` runs them in order."""
