"""The background-thread simulator, for synchronous callers such as the official client."""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes import config as k8s_config

import kubesim


def test_background_simulator_serves_sync_clients() -> None:
    with kubesim.BackgroundSimulator() as bg:
        alpha = bg.add_cluster("alpha", seed=1)
        bg.call(alpha.store.create, "PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "a", "default"))
        uid = bg.run(kubesim.ScenarioDriver(alpha, rate=None).run_lifecycle("TFJob", delete=False))
        api = k8s_config.new_client_from_config_dict(alpha.kubeconfig())
        co = k8s.CustomObjectsApi(api)
        assert co.list_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs")["items"]
        tfjobs = co.list_cluster_custom_object("kubeflow.org", "v1", "tfjobs")["items"]
        assert [t["metadata"]["uid"] for t in tfjobs] == [uid]
        api.close()
