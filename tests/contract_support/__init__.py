"""The emulator's behaviour contract: checks every Kubernetes double of this repository must
pass, written from a real v1.37.2 API server's answers.

Only this repository's tests use them (`tests/emulator/test_emu_contract.py`,
`tests/contract/`), so they live here, not in the wheel: they hold the emulator
(`k8s_ai_orchestrator.testing.kube`) and the real control plane
(`k8s_ai_orchestrator.testing.controlplane`) to the same answers, word for word.

- `contract.py`: `CHECKS`, and `NODE_CHECKS` (a node that runs containers);
- `contract_api.py`: `API_CHECKS` (an API server alone) and `HISTORY_CHECKS`;
- `contract_validation.py`: what the API server refuses, in its exact words;
- `contract_target.py`: `ContractTarget`, where the checks run.
"""
