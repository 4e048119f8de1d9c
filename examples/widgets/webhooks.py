"""The Widget webhooks: a small widget has at most 10 replicas; empty data gets a default.

Run next to controller.py: the Manager serves them, keeps their certificate and registers them.
"""

import copy

from kubemoon_core import GroupVersionResource
from kubemoon_core.webhooks import AdmissionResponse, WebhookDeclarations
from kubemoon_trio import Client, Manager

WIDGETS = GroupVersionResource("examples.kubemoon.dev", "v1", "widgets")
hooks = WebhookDeclarations("widgets")


@hooks.validating("/validate-widget", WIDGETS)
def at_most_ten_small(request):
    spec = request.object["spec"]
    if spec.get("tier") == "small" and spec.get("replicas", 1) > 10:
        return AdmissionResponse.deny("a small widget has at most 10 replicas")
    return AdmissionResponse.allow()


@hooks.mutating("/default-widget", WIDGETS)
def default_data(request):
    widget = copy.deepcopy(request.object)
    widget["spec"]["data"] = widget["spec"].get("data") or {"greeting": "hello"}
    return AdmissionResponse.patched(request.object, widget)


if __name__ == "__main__":
    manager = Manager(Client.from_environment(), name="examples.kubemoon.dev/widgets")
    manager.serve_webhooks(hooks, host="127.0.0.1")  # in a cluster: service=(namespace, name)
    manager.run_forever()
