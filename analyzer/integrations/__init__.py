"""Programs that other projects build, analysed through those projects' own code.

`analyzer.integrations.maxtext`: MaxText's training step from train_compile's command line
(`hlo-analyzer maxtext [CONFIG.yml] KEY=VALUE...`).
"""
