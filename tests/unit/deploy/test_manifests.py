"""deploy/ is checked, not just shipped: every Kubernetes object against the Kubernetes schema
(kubernetes-validate, offline), every custom resource against the CRD schema in deploy/schemas/
(derived from the upstream CRDs, source and version noted in each), the servegate command lines
against the real CLI, the Flagger webhook URLs against the routes servegate serves, the
Prometheus queries against the documented metric names, and the Dockerfile against the files it
copies. No docker build: the image is not built in CI."""

from __future__ import annotations

import copy
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import click
import jsonschema
import kubernetes_validate
import pytest
import yaml

from servegate.canary.flagger import FINISH_HOOK, HOOKS, flagger_routes
from servegate.canary.plan import parse_plan
from servegate.cli.main import DB_ENV, _register, cli
from servegate.config.matrix import load_matrix
from servegate.orchestration.ray_matrix import placeable

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
KUBERNETES = "1.33"  # the Kubernetes version whose schemas the manifests must satisfy
SCHEMAS = {
    "AnalysisTemplate": "argo-rollouts-analysistemplate.json",
    "Canary": "flagger-canary.json",
    "VirtualService": "istio-virtualservice.json",
    "RayJob": "kuberay-rayjob.json",
}
CORE_KINDS = {"ConfigMap", "Deployment", "Service", "Job", "NetworkPolicy"}


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                found.append((f"{path.relative_to(DEPLOY)}:{doc['kind']}", doc))
    return found


DOCS = documents()


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in DOCS if d["kind"] == kind]


def crd_errors(doc: dict[str, Any]) -> list[str]:
    schema = json.loads((DEPLOY / "schemas" / SCHEMAS[doc["kind"]]).read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def test_deploy_holds_each_integration() -> None:
    kinds = sorted(k.split(":")[1] for k, _ in DOCS)
    assert kinds == [
        "AnalysisTemplate", "AnalysisTemplate", "Canary", "ConfigMap", "Deployment",
        "NetworkPolicy", "RayJob", "Service", "Service", "VirtualService",
    ]  # fmt: skip


@pytest.mark.parametrize(("where", "doc"), DOCS, ids=[w for w, _ in DOCS])
def test_every_object_satisfies_its_schema(where: str, doc: dict[str, Any]) -> None:
    if doc["kind"] in CORE_KINDS:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    else:
        assert crd_errors(doc) == [], where


def test_the_analysis_jobs_are_valid_kubernetes_jobs() -> None:
    jobs = [
        m["provider"]["job"]
        for t in of_kind("AnalysisTemplate")
        for m in t["spec"]["metrics"]
        if "job" in m["provider"]
    ]
    assert jobs
    for job in jobs:
        manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, **job}
        kubernetes_validate.validate(manifest, KUBERNETES, strict=True)


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("AnalysisTemplate", ["spec", "metrics", 0, "sucessCondition"], "true"),
        ("AnalysisTemplate", ["spec", "metrics", 0, "provider", "kayenta"], {}),
        ("Canary", ["spec", "analysis", "webhooks", 0, "type"], "pre-rollout-typo"),
        ("Canary", ["spec", "analysis", "interval"], "one minute"),
        ("VirtualService", ["spec", "http", 0, "mirrors", 0, "percentage", "value"], "5%"),
        ("VirtualService", ["spec", "http", 0, "route", 0, "destination", "hostname"], "x"),
        ("RayJob", ["spec", "shutdownAfterJobFinish"], True),
        ("RayJob", ["spec", "rayClusterSpec", "workerGroupSpecs", 0, "replicas"], "two"),
        ("RayJob", ["spec", "rayClusterSpec", "headGroupSpec", "rayStartParams", "num-gpus"], 0),
    ],
    ids=[
        "misspelt-condition", "unused-provider", "unknown-webhook-type", "interval-pattern",
        "percentage-type", "misspelt-host", "rayjob-misspelt-field", "rayjob-replicas-type",
        "rayjob-start-param-type",
    ],
)  # fmt: skip
def test_the_crd_schemas_refuse_what_the_crds_would(
    kind: str, path: list[str | int], value: Any
) -> None:
    doc = copy.deepcopy(of_kind(kind)[0])
    node: Any = doc
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    assert crd_errors(doc) != []


def _argv(args: list[str]) -> list[str]:
    # Argo's {{args.x}} and Kubernetes' $(VAR) are filled in by the cluster.
    return [re.sub(r"\{\{args\.[a-z-]+\}\}|\$\([A-Z_]+\)", "http://x:1/v1", a) for a in args]


def _parse(argv: list[str]) -> None:
    _register()
    name, *rest = argv
    command = cli.commands.get(name)
    if command is None:
        pytest.fail(f"`servegate {name}` is not a command on this branch")
    command.make_context(f"servegate {name}", rest)


def test_the_gate_job_runs_a_real_servegate_gate_command_line() -> None:
    [container] = [
        c
        for t in of_kind("AnalysisTemplate")
        for m in t["spec"]["metrics"]
        if "job" in m["provider"]
        for c in m["provider"]["job"]["spec"]["template"]["spec"]["containers"]
    ]
    argv = _argv(container["args"])
    assert argv[0] == "gate"
    _parse(argv)
    with pytest.raises(click.UsageError):  # the check can fail: a misspelt option is refused
        _parse([*argv, "--basline", "x"])


def test_the_proxy_deployment_runs_a_real_servegate_proxy_command_line() -> None:
    [deployment] = of_kind("Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    _register()
    argv = _argv(container["args"])
    assert argv[0] == "proxy"
    _parse(argv)
    params = cli.commands["proxy"].make_context("servegate proxy", argv[1:]).params
    assert params["mode"] == "canary"
    plan = parse_plan(params["steps"], params["interval"])  # what the proxy will run
    assert plan.steps[-1] == 100
    with pytest.raises(click.UsageError):  # the check can fail: a misspelt option is refused
        _parse([*argv, "--stpes", "1,100"])


def _service(name: str) -> dict[str, Any]:
    [service] = [s for s in of_kind("Service") if s["metadata"]["name"] == name]
    return service


def _proxy_args() -> dict[str, Any]:
    [deployment] = of_kind("Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    _register()
    argv = _argv(container["args"])
    params: dict[str, Any] = cli.commands["proxy"].make_context("servegate proxy", argv[1:]).params
    return params


def test_flaggers_webhooks_point_at_the_routes_servegate_serves() -> None:
    routes = {r.path for r in flagger_routes(dict)}
    [canary] = of_kind("Canary")
    hooks = canary["spec"]["analysis"]["webhooks"]
    assert {h["type"] for h in hooks} == {*HOOKS, FINISH_HOOK}
    for hook in hooks:
        # the state-changing hook goes to the admin address, the read-only ones to the user port
        service = _service(
            "servegate-proxy-admin" if hook["type"] == FINISH_HOOK else "servegate-proxy"
        )
        url = urlparse(hook["url"])
        assert url.path in routes
        assert url.path.endswith(f"/{hook['type']}")
        assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}"
        assert url.port == service["spec"]["ports"][0]["port"]


def test_the_admin_address_is_its_own_port_reachable_only_from_flaggers_namespace() -> None:
    params = _proxy_args()
    user_port = int(params["listen"].rpartition(":")[2])
    admin_port = int(params["admin_listen"].rpartition(":")[2])
    assert admin_port != user_port
    [deployment] = of_kind("Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": user_port, "admin": admin_port}
    assert _service("servegate-proxy-admin")["spec"]["ports"][0]["targetPort"] == "admin"
    assert [p["targetPort"] for p in _service("servegate-proxy")["spec"]["ports"]] == ["http"]
    [policy] = of_kind("NetworkPolicy")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    rules = policy["spec"]["ingress"]
    open_ports = {p["port"] for r in rules if "from" not in r for p in r["ports"]}
    assert open_ports == {user_port}  # anyone: the user port only
    [admin_rule] = [r for r in rules if admin_port in {p["port"] for p in r["ports"]}]
    [source] = admin_rule["from"]
    assert source == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "flagger-system"}}
    }


def _queried_metrics() -> set[str]:
    names = set()
    for template in of_kind("AnalysisTemplate"):
        for metric in template["spec"]["metrics"]:
            query = metric["provider"].get("prometheus", {}).get("query", "")
            names |= set(re.findall(r"servegate_[a-z0-9_]+", query))
    return names


def test_every_queried_metric_is_named_in_docs_deploy_md() -> None:
    queried = _queried_metrics()
    assert queried
    documented = set(re.findall(r"`(servegate_[a-z0-9_]+)`", (ROOT / "docs/deploy.md").read_text()))
    assert queried <= documented, sorted(queried - documented)


def test_every_queried_metric_is_exported_by_the_proxy() -> None:
    from servegate.proxy.exposition import ProxyMetrics

    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    exported = {
        family.name + suffix
        for family in ProxyMetrics(lambda: 0, 1).registry.collect()
        for suffix in suffixes.get(family.type, ("",))
    }
    assert _queried_metrics() <= exported, sorted(_queried_metrics() - exported)


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            word, _, rest = stripped.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_the_dockerfile_copies_files_that_exist_and_runs_servegate() -> None:
    steps = _instructions((DEPLOY / "Dockerfile").read_text(encoding="utf-8"))
    known = {"ARG", "FROM", "WORKDIR", "COPY", "RUN", "ENV", "USER", "EXPOSE", "ENTRYPOINT", "CMD"}
    assert {word for word, _ in steps} <= known
    # The base is an ARG before the first FROM (scripts/image.sh --base), the official image by
    # default, and both stages use it (the venv is copied between them).
    assert steps[0] == ("ARG", "PYTHON_IMAGE=python:3.11-slim")
    assert [rest for word, rest in steps if word == "FROM"] == [
        "${PYTHON_IMAGE} AS build",
        "${PYTHON_IMAGE}",
    ]
    # `servegate proxy` runs in it (servegate-proxy.yaml): the proxy extra, and the PostgreSQL
    # driver for the shared store.
    assert any(word == "RUN" and '".[proxy,postgres]"' in rest for word, rest in steps)
    copies = [rest.split() for word, rest in steps if word == "COPY"]
    sources = [s for c in copies if not c[0].startswith("--from") for s in c[:-1]]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "postgres" in pyproject["project"]["optional-dependencies"]
    [entrypoint] = [json.loads(rest) for word, rest in steps if word == "ENTRYPOINT"]
    assert entrypoint == ["servegate"]
    assert "servegate" in pyproject["project"]["scripts"]
    [exposed] = [int(rest) for word, rest in steps if word == "EXPOSE"]
    [deployment] = of_kind("Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["ports"][0]["containerPort"] == exposed
    # Every manifest names the image the Dockerfile builds: servegate:<version>, the tag its
    # build line and scripts/image.sh give it (the Ray cluster's have their own image, below).
    tag = f"servegate:{pyproject['project']['version']}"
    images = re.findall(r"^\s*image:\s*(\S+)", _all_manifest_text(), flags=re.MULTILINE)
    assert images
    assert set(images) == {tag}
    assert container["image"] == tag
    assert f"-t {tag} ." in (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    assert "image=${SERVEGATE_IMAGE:-servegate:$version}" in (
        ROOT / "scripts" / "image.sh"
    ).read_text(encoding="utf-8")


def _all_manifest_text(folder: Path = DEPLOY) -> str:
    """The manifests' text; the Ray cluster's (deploy/kuberay/) only when `folder` is it."""
    paths = sorted(folder.rglob("*.yaml"))
    if folder == DEPLOY:
        paths = [p for p in paths if KUBERAY not in p.parents]
    return "".join(p.read_text(encoding="utf-8") for p in paths)


# ---- the matrix on a Ray cluster (deploy/kuberay/) ----------------------------------------

KUBERAY = DEPLOY / "kuberay"


def _rayjob() -> dict[str, Any]:
    [job] = of_kind("RayJob")
    return job


def test_the_rayjobs_pod_templates_are_valid_kubernetes_pods() -> None:
    cluster = _rayjob()["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"]]
    templates += [g["template"] for g in cluster["workerGroupSpecs"]]
    for template in templates:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, **template}
        kubernetes_validate.validate(pod, KUBERNETES, strict=True)
    bad = copy.deepcopy(templates[0])
    bad["spec"]["containers"][0]["volumeMount"] = []  # misspelt: the check can fail
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, **bad}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, KUBERNETES, strict=True)


def test_the_rayjob_runs_a_real_servegate_matrix_on_ray_command_line(tmp_path: Path) -> None:
    job = _rayjob()
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:2] == ["servegate", "matrix"]
    mounted = Path(argv[2])
    argv[2] = str(tmp_path / "matrix.yaml")  # the file must exist for the command line to parse
    (tmp_path / "matrix.yaml").write_text("{}", encoding="utf-8")
    _parse(argv[1:])
    _register()
    params = cli.commands["matrix"].make_context("servegate matrix", argv[2:]).params
    assert params["ray_address"] == "auto"
    # The store comes from the head's environment (a Secret), never from the command line.
    assert "--db" not in argv
    [head] = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"]
    [db] = [e for e in head["env"] if e["name"] == DB_ENV]
    assert "secretKeyRef" in db["valueFrom"]
    # The matrix file it names is the ConfigMap mounted there.
    [mount] = head["volumeMounts"]
    assert mounted.parent == Path(mount["mountPath"])
    [volume] = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["volumes"]
    [config] = of_kind("ConfigMap")
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    assert mounted.name in config["data"]
    with pytest.raises(click.UsageError):  # the check can fail: a misspelt option is refused
        _parse([*argv[1:], "--rya", "auto"])


def test_every_entry_of_the_shipped_matrix_fits_a_worker_of_the_rayjob(tmp_path: Path) -> None:
    [config] = of_kind("ConfigMap")
    path = tmp_path / "matrix.yaml"
    path.write_text(config["data"]["matrix.yaml"], encoding="utf-8")
    matrix = load_matrix(path)  # a valid matrix file, every entry's run configuration included
    cluster = _rayjob()["spec"]["rayClusterSpec"]
    workers = []
    for group in cluster["workerGroupSpecs"]:
        [container] = group["template"]["spec"]["containers"]
        gpus = float(container["resources"]["limits"]["nvidia.com/gpu"])
        product = group["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
        accelerator = re.search(r"(H100|H200|A100|L4|B200)", product)
        assert accelerator is not None, product
        workers.append({"CPU": float(container["resources"]["requests"]["cpu"]), "GPU": gpus,
                        f"accelerator_type:{accelerator.group(1)}": 1.0})  # fmt: skip
    for entry in matrix.entries:
        assert placeable(entry.needs(), workers), entry.name
    head = {"CPU": 2.0}  # num-gpus 0: the head runs the driver, never an entry
    assert cluster["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    assert not any(placeable(e.needs(), [head]) for e in matrix.entries)


def test_the_ray_image_copies_files_that_exist_and_installs_servegate_ray() -> None:
    text = (KUBERAY / "Dockerfile").read_text(encoding="utf-8")
    steps = _instructions(text)
    assert {word for word, _ in steps} <= {"ARG", "FROM", "WORKDIR", "COPY", "RUN"}
    [base] = [rest for word, rest in steps if word == "ARG" and rest.startswith("RAY_IMAGE=")]
    ray_version = _rayjob()["spec"]["rayClusterSpec"]["rayVersion"]
    assert base.startswith(f"RAY_IMAGE=rayproject/ray:{ray_version}-py311")  # the cluster's Ray
    assert any(word == "RUN" and '".[ray,postgres]"' in rest for word, rest in steps)
    sources = [s for word, rest in steps if word == "COPY" for s in rest.split()[:-1]]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tag = f"servegate-ray:{pyproject['project']['version']}"
    images = re.findall(r"^\s*image:\s*(\S+)", _all_manifest_text(KUBERAY), flags=re.MULTILINE)
    assert set(images) == {tag}
    assert f"-t {tag} ." in text
