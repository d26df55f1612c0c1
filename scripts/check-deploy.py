#!/usr/bin/env python3
"""Checks the deployment: k8s/ (kustomize base + overlays) and terraform/.

    python3 scripts/check-deploy.py --trawl target/debug/trawl

For each overlay it renders the manifests (kustomize's resources, namespace, images, labels,
replicas and patches; when `kubectl` is on the machine its `kubectl kustomize` must render the
same objects), validates every built-in object against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict), and checks that every cross-reference resolves: service
accounts, ConfigMaps and their keys, Secrets and their keys (in the build or declared in
k8s/external-secrets.yaml), volumes, claims, probe and Service ports, selectors, images,
KEDA targets, topics and consumer groups against the config, the config file and repos file
the containers are pointed at. The `trawl.toml` of each overlay is loaded by the trawl binary
itself (`trawl --config <file> config`): the same serde structs, unknown keys refused.

For terraform/ it parses every .tf file (python-hcl2), and checks that every variable has a
type and a description, every `var.x` used is declared, module sources exist and their
required variables are passed, the outputs the overlays need exist, and every variable and
output is documented in terraform/README.md.

Needs: pyyaml, python-hcl2, kubernetes-validate (scripts/test.sh installs them). Exits 1 with
one line per problem.
"""

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

import hcl2
import kubernetes_validate
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S_VERSION = "1.31.0"
IMAGE = "ghcr.io/trawl-dev/trawl"
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "StorageClass"}
CRDS = {("keda.sh/v1alpha1", "ScaledObject")}
WORKER_GROUPS = {"chunk-worker": ("chunk-worker", "topic_files", "files"),
                 "embed-worker": ("embed-worker", "topic_chunks", "chunks")}

problems = []


def problem(where, msg):
    problems.append(f"{where}: {msg}")


# ---------------------------------------------------------------------------------------------
# kustomize, the subset this repository uses

def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def strategic_merge(base, patch):
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = strategic_merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and patch
            and all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = [copy.deepcopy(x) for x in base]
        added = []
        for item in patch:
            for i, x in enumerate(out):
                if x["name"] == item["name"]:
                    out[i] = strategic_merge(x, item)
                    break
            else:
                added.append(copy.deepcopy(item))
        # kubectl puts a patch's new items before the existing ones.
        return added + out
    return copy.deepcopy(patch)


def json_pointer(doc, path):
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]
    parent = doc
    for p in parts[:-1]:
        parent = parent[int(p)] if isinstance(parent, list) else parent[p]
    return parent, parts[-1]


def json6902(doc, ops):
    doc = copy.deepcopy(doc)
    for op in ops:
        parent, key = json_pointer(doc, op["path"])
        if isinstance(parent, list):
            key = len(parent) if key == "-" else int(key)
        if op["op"] == "remove":
            del parent[key]
        elif op["op"] == "replace":
            if isinstance(parent, dict) and key not in parent:
                raise KeyError(f"replace: {op['path']} does not exist")
            parent[key] = op["value"]
        elif op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(key, op["value"])
            else:
                parent[key] = op["value"]
        else:
            raise ValueError(f"unsupported op {op['op']}")
    return doc


def matches(obj, target):
    return all(obj.get(k) == v if k in ("kind", "apiVersion") else obj["metadata"].get(k) == v
               for k, v in target.items())


def add_labels(obj, pairs, templates):
    obj.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
    if not templates:
        return
    spec = obj.get("spec", {})
    for tpl in (spec.get("template"), spec.get("jobTemplate", {}).get("spec", {}).get("template")):
        if isinstance(tpl, dict):
            tpl.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
    job = spec.get("jobTemplate")
    if isinstance(job, dict):
        job.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)


def containers(obj):
    spec = obj.get("spec", {})
    pod = spec.get("template", {}).get("spec") or \
        spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec")
    if not pod:
        return None, []
    return pod, pod.get("containers", []) + pod.get("initContainers", [])


def render(directory):
    k = yaml.safe_load(open(os.path.join(directory, "kustomization.yaml")))
    objs = []
    for r in k.get("resources", []):
        p = os.path.normpath(os.path.join(directory, r))
        objs.extend(render(p) if os.path.isdir(p) else load_docs(p))
    for lab in k.get("labels", []):
        for o in objs:
            add_labels(o, lab["pairs"], lab.get("includeTemplates", False))
    for img in k.get("images", []):
        for o in objs:
            for c in containers(o)[1]:
                name, _, tag = c["image"].partition(":")
                if name == img["name"]:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
    for rep in k.get("replicas", []):
        for o in objs:
            if o["metadata"]["name"] == rep["name"] and "replicas" in o.get("spec", {}):
                o["spec"]["replicas"] = rep["count"]
    for p in k.get("patches", []):
        if "path" in p:
            patches = load_docs(os.path.join(directory, p["path"]))
        else:
            patches = [yaml.safe_load(p["patch"])]
        for patch in patches:
            if isinstance(patch, list):
                hits = [i for i, o in enumerate(objs) if matches(o, p.get("target", {}))]
                if not hits:
                    problem(directory, f"patch target {p.get('target')} matches nothing")
                for i in hits:
                    objs[i] = json6902(objs[i], patch)
            else:
                target = {"kind": patch["kind"], "name": patch["metadata"]["name"]}
                hits = [i for i, o in enumerate(objs) if matches(o, target)]
                if not hits:
                    problem(directory, f"patch for {target} matches nothing")
                for i in hits:
                    objs[i] = strategic_merge(objs[i], patch)
    if "namespace" in k:
        for o in objs:
            if o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = k["namespace"]
    return objs


def key(o):
    return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])


# ---------------------------------------------------------------------------------------------
# checks on one rendered overlay

def check_overlay(name, objs, trawl, external):
    where = os.path.normpath(f"k8s/overlays/{name}")
    by = {}
    for o in objs:
        if key(o) in by:
            problem(where, f"{key(o)} defined twice")
        by[key(o)] = o

    def exists(kind, n, ns):
        return (kind, ns, n) in by

    for o in objs:
        if (o["apiVersion"], o["kind"]) in CRDS:
            continue
        try:
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            problem(where, f"{o['kind']}/{o['metadata']['name']}: {e.message} at {list(e.path)}")
        except Exception as e:  # noqa: BLE001 — an unknown kind is a finding too
            problem(where, f"{o['kind']}/{o['metadata']['name']}: {e}")

    # The config the containers read, checked by the trawl binary itself.
    cms = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    config = None
    cm = cms.get("trawl-config")
    if not cm or "trawl.toml" not in cm.get("data", {}):
        problem(where, "no ConfigMap trawl-config with trawl.toml")
    else:
        text = cm["data"]["trawl.toml"]
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAWL_")}
        r = subprocess.run([trawl, "--config", f.name, "config"], capture_output=True, text=True, env=env)
        os.unlink(f.name)
        if r.returncode != 0:
            problem(where, f"trawl.toml refused by trawl: {r.stderr.strip()}")
        else:
            config = tomllib.loads(r.stdout)
        try:
            repos = tomllib.loads(cm["data"].get("repos.toml", ""))
            if not repos.get("repo") or not all("url" in x for x in repos["repo"]):
                problem(where, "repos.toml lists no [[repo]] with a url")
        except tomllib.TOMLDecodeError as e:
            problem(where, f"repos.toml: {e}")

    pods = {}
    for o in objs:
        pod, cs = containers(o)
        if pod is None:
            continue
        ns = o["metadata"].get("namespace", "")
        what = f"{where} {o['kind']}/{o['metadata']['name']}"
        pods[o["metadata"]["name"]] = (o, pod, cs)
        sa = pod.get("serviceAccountName")
        if not sa or not exists("ServiceAccount", sa, ns):
            problem(what, f"service account {sa!r} is not defined")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for v in volumes.values():
            if "configMap" in v and v["configMap"]["name"] not in cms:
                problem(what, f"volume {v['name']}: ConfigMap {v['configMap']['name']} is not defined")
            if "persistentVolumeClaim" in v and not exists(
                    "PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"], ns):
                problem(what, f"volume {v['name']}: claim {v['persistentVolumeClaim']['claimName']} is not defined")
            if "secret" in v:
                check_secret(what, v["secret"]["secretName"], None, by, ns, external)
        for c in cs:
            image = c.get("image", "")
            if not re.fullmatch(re.escape(IMAGE) + r":[\w.\-]+", image):
                problem(what, f"container {c['name']}: image {image!r} is not {IMAGE}:<tag>")
            mounts = {}
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    problem(what, f"container {c['name']}: mount of undefined volume {m['name']}")
                else:
                    mounts[m["mountPath"]] = volumes[m["name"]]
            for e in c.get("env", []):
                ref = e.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    s = ref["secretKeyRef"]
                    if not s.get("optional"):
                        check_secret(what, s["name"], s["key"], by, ns, external)
                if "configMapKeyRef" in ref:
                    r = ref["configMapKeyRef"]
                    if r["key"] not in cms.get(r["name"], {}).get("data", {}):
                        problem(what, f"env {e['name']}: ConfigMap key {r['name']}/{r['key']} is not defined")
            ports = {p.get("name") for p in c.get("ports", [])}
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                if isinstance(port, str) and port not in ports:
                    problem(what, f"{probe} names port {port!r}, which the container does not have")
            args = c.get("args", [])
            for flag in ("--config", "--repos"):
                if flag in args:
                    path = args[args.index(flag) + 1]
                    vol = mounts.get(os.path.dirname(path))
                    keyname = os.path.basename(path)
                    if not vol or "configMap" not in vol or \
                            keyname not in cms.get(vol["configMap"]["name"], {}).get("data", {}):
                        problem(what, f"{flag} {path} is not a key of a mounted ConfigMap")
            if config and "--config" not in args:
                problem(what, f"container {c['name']} is not given --config")
            stage = args[2] if len(args) > 2 else ""
            given = {e["name"] for e in c.get("env", [])
                     if not e.get("valueFrom", {}).get("secretKeyRef", {}).get("optional")}
            if config and stage in ("query", "serve", "embed-worker", "embed"):
                # The vector space needs its key: a query service without it refuses to start
                # (it will not serve a vector index lexical-only), a worker fails every batch.
                voyage = config["embed"]["embedder"] == "voyage" or (
                    stage in ("query", "serve") and config["query"].get("rerank_model"))
                if voyage and "VOYAGE_API_KEY" not in given:
                    problem(what, f"container {c['name']} runs {stage} with a Voyage vector space "
                                  "(embed.embedder = \"voyage\") but gets no VOYAGE_API_KEY "
                                  "(from a Secret, not optional)")
            if config and stage in ("query", "serve"):
                serve = config.get("serve", {})
                tls = [(k, serve.get(k, "")) for k in ("tls_cert", "tls_key")]
                scheme = "HTTPS" if any(v for _, v in tls) else "HTTP"
                if scheme == "HTTPS":
                    for k, v in tls:
                        vol = mounts.get(os.path.dirname(v))
                        if not vol or "secret" not in vol:
                            problem(what, f"serve.{k} {v!r} is not a key of a mounted Secret")
                        else:
                            check_secret(f"{what} serve.{k}", vol["secret"]["secretName"],
                                         os.path.basename(v), by, ns, external)
                for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                    g = c.get(probe, {}).get("httpGet")
                    if g and g.get("scheme", "HTTP") != scheme:
                        problem(what, f"{probe} speaks {g.get('scheme', 'HTTP')} to a server that "
                                      f"speaks {scheme} (serve.tls_cert)")
            if config and len(args) > 2 and args[2] in ("query", "serve"):
                env_names = {e["name"] for e in c.get("env", [])}
                for t in config.get("query", {}).get("tokens", []):
                    if t.get("token_env") and t["token_env"] not in env_names:
                        problem(what, f"query token {t['name']}: {t['token_env']} is not set")
                port = int(config["query"]["listen"].rsplit(":", 1)[1])
                if port not in {p["containerPort"] for p in c.get("ports", [])}:
                    problem(what, f"query.listen port {port} is not a container port")
            # (`compactor --gc` is a one-shot retention pass: no ops server.)
            if config and args[2:3] and args[2] in ("chunk-worker", "embed-worker", "fetcher", "compactor") \
                    and "--gc" not in args:
                port = int(config["ops"]["listen"].rsplit(":", 1)[1])
                if port not in {p["containerPort"] for p in c.get("ports", [])}:
                    problem(what, f"ops.listen port {port} is not a container port")

    def selected(selector, ns):
        want = selector.get("matchLabels", {})
        exprs = selector.get("matchExpressions", [])
        hits = []
        for n, (o, pod, _) in pods.items():
            labels = (o["spec"].get("template") or o["spec"]["jobTemplate"]["spec"]["template"]) \
                .get("metadata", {}).get("labels", {})
            if o["metadata"].get("namespace", "") != ns:
                continue
            if all(labels.get(k) == v for k, v in want.items()) and all(
                    (labels.get(e["key"]) in e["values"]) == (e["operator"] == "In") for e in exprs):
                hits.append(n)
        return hits

    for o in objs:
        ns = o["metadata"].get("namespace", "")
        what = f"{where} {o['kind']}/{o['metadata']['name']}"
        spec = o.get("spec", {})
        if o["kind"] == "Deployment":
            labels = spec["template"]["metadata"].get("labels", {})
            if any(labels.get(k) != v for k, v in spec["selector"]["matchLabels"].items()):
                problem(what, "selector does not match the pod template's labels")
        if o["kind"] == "ServiceAccount":
            if not o["metadata"].get("annotations", {}).get("eks.amazonaws.com/role-arn", "").startswith("arn:aws:iam::"):
                problem(what, "no eks.amazonaws.com/role-arn annotation")
        if o["kind"] == "Service":
            hits = selected({"matchLabels": spec.get("selector", {})}, ns)
            if not hits:
                problem(what, "selects no pods")
            for p in spec.get("ports", []):
                tp = p.get("targetPort")
                for n in hits:
                    names = {q.get("name") for c in pods[n][2] for q in c.get("ports", [])}
                    nums = {q["containerPort"] for c in pods[n][2] for q in c.get("ports", [])}
                    if tp not in names and tp not in nums:
                        problem(what, f"targetPort {tp!r} is not a port of {n}")
            # Clients reach the query service by the Service's name: the server must answer
            # to it (any other Host is refused, against DNS rebinding).
            for n in hits:
                if config and pods[n][2][0].get("args", [])[2:3] in (["query"], ["serve"]):
                    allowed = config.get("serve", {}).get("allowed_hosts", [])
                    if "*" not in allowed and o["metadata"]["name"] not in allowed:
                        problem(what, f"serve.allowed_hosts does not name {o['metadata']['name']}: "
                                      "clients using the Service's DNS name would get 421")
        if o["kind"] == "NetworkPolicy":
            for rule in spec.get("ingress", []):
                if not rule.get("from"):
                    problem(what, "admits its ports from anywhere: name the clients "
                                  "(podSelector, namespaceSelector)")
        if o["kind"] in ("PodDisruptionBudget", "NetworkPolicy"):
            sel = spec.get("selector") or spec.get("podSelector")
            if not selected(sel, ns):
                problem(what, "selects no pods")
        if o["kind"] == "HorizontalPodAutoscaler":
            t = spec["scaleTargetRef"]
            if not exists(t["kind"], t["name"], ns):
                problem(what, f"target {t['kind']}/{t['name']} is not defined")
        if o["kind"] == "ScaledObject":
            t = spec["scaleTargetRef"]["name"]
            if not exists("Deployment", t, ns):
                problem(what, f"target Deployment/{t} is not defined")
                continue
            args = pods[t][2][0].get("args", [])
            stage = args[2] if len(args) > 2 else ""
            if stage not in WORKER_GROUPS:
                problem(what, f"scales {t}, which runs {stage!r}, not a worker")
                continue
            group, topic_key, _ = WORKER_GROUPS[stage]
            for trig in spec.get("triggers", []):
                m = trig.get("metadata", {})
                if trig.get("type") != "kafka":
                    problem(what, f"trigger type {trig.get('type')} (expected kafka)")
                    continue
                if m.get("consumerGroup") != group:
                    problem(what, f"consumerGroup {m.get('consumerGroup')!r}; the {stage} group is {group!r}")
                if config:
                    topic = config["bus"][topic_key]
                    if m.get("topic") != topic:
                        problem(what, f"topic {m.get('topic')!r}; bus.{topic_key} is {topic!r}")
                    bus = config["bus"]["url"]
                    brokers = bus.removeprefix("kafka://").split("?")[0].split(",")
                    if not bus.startswith("kafka://"):
                        problem(what, f"scales on Kafka lag but bus.url is {bus!r}")
                    elif sorted(m.get("bootstrapServers", "").split(",")) != sorted(brokers):
                        problem(what, f"bootstrapServers {m.get('bootstrapServers')!r} are not bus.url's {brokers}")
    for kind in ("Deployment", "CronJob"):
        if not any(o["kind"] == kind for o in objs):
            problem(where, f"no {kind}")


def check_secret(what, name, keyname, by, ns, external):
    obj = by.get(("Secret", ns, name))
    if obj:
        if keyname and keyname not in {**obj.get("data", {}), **obj.get("stringData", {})}:
            problem(what, f"Secret {name} has no key {keyname}")
    elif name not in external:
        problem(what, f"Secret {name} is neither defined nor declared in k8s/external-secrets.yaml")
    elif keyname and keyname not in external[name]:
        problem(what, f"Secret {name}: key {keyname} is not declared in k8s/external-secrets.yaml")


# ---------------------------------------------------------------------------------------------
# terraform

NEEDED_OUTPUTS = {"bucket_name", "kafka_bootstrap_brokers", "stage_role_arns"}


def tf_dir(path):
    blocks = {"variable": {}, "output": {}, "module": {}, "text": ""}
    for f in sorted(os.listdir(path)):
        if not f.endswith(".tf"):
            continue
        text = open(os.path.join(path, f)).read()
        blocks["text"] += text
        try:
            doc = hcl2.loads(text)
        except Exception as e:  # noqa: BLE001
            problem(f"{path}/{f}", f"does not parse: {e}")
            continue
        for kind in ("variable", "output", "module"):
            for b in doc.get(kind, []):
                for n, body in b.items():
                    blocks[kind][n.strip('"')] = body
    return blocks


def check_terraform(base):
    root = os.path.join(base, "terraform")
    readme = open(os.path.join(root, "README.md")).read()
    dirs = [root] + [os.path.join(root, "modules", d) for d in sorted(os.listdir(os.path.join(root, "modules")))]
    parsed = {d: tf_dir(d) for d in dirs}
    for d, b in parsed.items():
        rel = os.path.relpath(d, base)
        for n, body in b["variable"].items():
            for field in ("type", "description"):
                if field not in body:
                    problem(rel, f"variable {n} has no {field}")
            if f"`{n}`" not in readme:
                problem(rel, f"variable {n} is not documented in terraform/README.md")
        for n, body in b["output"].items():
            if "description" not in body:
                problem(rel, f"output {n} has no description")
            if f"`{n}`" not in readme:
                problem(rel, f"output {n} is not documented in terraform/README.md")
        for used in sorted(set(re.findall(r"\bvar\.([A-Za-z_][\w]*)", b["text"]))):
            if used not in b["variable"]:
                problem(rel, f"var.{used} is used but not declared")
        for n, body in b["module"].items():
            src = os.path.normpath(os.path.join(d, body["source"].strip('"')))
            if src not in parsed:
                problem(rel, f"module {n}: source {body['source']} is not a module here")
                continue
            for v, vb in parsed[src]["variable"].items():
                if "default" not in vb and v not in body:
                    problem(rel, f"module {n}: required variable {v} is not passed")
            for v in body:
                if v not in parsed[src]["variable"] and v not in (
                        "source", "count", "for_each", "providers", "depends_on", "__is_block__"):
                    problem(rel, f"module {n}: {v} is not a variable of {body['source']}")
    missing = NEEDED_OUTPUTS - set(parsed[root]["output"])
    if missing:
        problem("terraform", f"outputs the k8s overlays need are missing: {sorted(missing)}")


def check(base, trawl, quiet=False):
    """Every check on the tree at `base`; the problems found."""
    problems.clear()
    external = {}
    for d in load_docs(os.path.join(base, "k8s", "external-secrets.yaml")):
        for sec in d["secrets"]:
            external[sec["name"]] = set(sec["keys"])
    kubectl = shutil.which("kubectl")
    # The base too: it must stand on its own (its config is what an overlay starts from).
    overlays = ["../base"] + sorted(os.listdir(os.path.join(base, "k8s", "overlays")))
    for name in overlays:
        d = os.path.normpath(os.path.join(base, "k8s", "overlays", name))
        try:
            objs = render(d)
        except (KeyError, IndexError, ValueError, TypeError) as e:
            problem(os.path.normpath(f"k8s/overlays/{name}"), f"cannot render: {e!r}")
            continue
        if kubectl:
            r = subprocess.run([kubectl, "kustomize", d], capture_output=True, text=True)
            if r.returncode != 0:
                problem(os.path.normpath(f"k8s/overlays/{name}"), f"kubectl kustomize failed: {r.stderr.strip()}")
            else:
                theirs = sorted(json.dumps(o, sort_keys=True) for o in yaml.safe_load_all(r.stdout) if o)
                ours = sorted(json.dumps(o, sort_keys=True) for o in objs)
                if theirs != ours:
                    diff = set(theirs) ^ set(ours)
                    problem(os.path.normpath(f"k8s/overlays/{name}"),
                            f"kubectl kustomize renders differently: {sorted(diff)[:2]}")
        check_overlay(name, objs, trawl, external)
        if not quiet:
            print(f"{os.path.normpath(f'k8s/overlays/{name}')}: {len(objs)} objects"
                  + (", the same as kubectl kustomize renders" if kubectl else ""))
    check_terraform(base)
    if not quiet:
        print(f"terraform: root and {len(os.listdir(os.path.join(base, 'terraform', 'modules')))} modules parsed")
    return list(problems)


# Each mistake the checks must catch: (file, text, replacement, what the problem says).
MUTATIONS = [
    ("k8s/base/query.yaml", "serviceAccountName: trawl-query", "serviceAccountName: trawl-querry",
     "service account 'trawl-querry' is not defined"),
    ("k8s/base/embed-worker.yaml", "key: api-key", "key: apikey", "key apikey is not declared"),
    ("k8s/overlays/prod/config.yaml", 'shards = "auto"', 'shard = "auto"', "trawl.toml refused by trawl"),
    ("k8s/overlays/prod/kustomization.yaml", "value: trawl.files", "value: files",
     "bus.topic_files is 'trawl.files'"),
    ("k8s/base/chunk-worker.yaml", "port: ops", "port: metrics", "names port 'metrics'"),
    ("k8s/base/query.yaml", "name: QUERY_TOKEN_AGENTS", "name: QUERY_TOKEN_AGENT",
     "QUERY_TOKEN_AGENTS is not set"),
    ("k8s/base/fetcher.yaml", "claimName: trawl-mirrors", "claimName: trawl-mirror",
     "claim trawl-mirror is not defined"),
    ("k8s/base/query.yaml", "image: trawl", "image: nginx", "image 'nginx' is not"),
    ("k8s/base/query.yaml", "minAvailable: 1", "minAvailabel: 1", "PodDisruptionBudget/trawl-query"),
    ("k8s/base/query.yaml", "targetPort: http", "targetPort: web", "targetPort 'web'"),
    ("k8s/base/embed-worker.yaml", "consumerGroup: embed-worker", "consumerGroup: embedders",
     "the embed-worker group is 'embed-worker'"),
    ("k8s/base/compactor.yaml", "/etc/trawl/trawl.toml", "/etc/trawl/config.toml",
     "--config /etc/trawl/config.toml is not a key"),
    ("k8s/base/networkpolicies.yaml", "trawl.dev/egress: git-kafka-s3", "trawl.dev/egress: git",
     "NetworkPolicy/trawl-egress-git-ssh: selects no pods"),
    ("k8s/base/query.yaml", "- name: VOYAGE_API_KEY", "- name: VOYAGE_KEY",
     "runs query with a Voyage vector space (embed.embedder = \"voyage\") but gets no VOYAGE_API_KEY"),
    ("k8s/overlays/prod/config.yaml", 'tls_key = "/etc/trawl-tls/tls.key"',
     'tls_key = "/etc/trawl-tls/key.pem"', "serve.tls_key: Secret trawl-query-tls: key key.pem"),
    ("k8s/overlays/prod/query-tls.yaml", "scheme: HTTPS", "scheme: HTTP",
     "readinessProbe speaks HTTP to a server that speaks HTTPS"),
    ("k8s/overlays/prod/config.yaml", 'allowed_hosts = ["trawl-query", ', 'allowed_hosts = [',
     "serve.allowed_hosts does not name trawl-query"),
    ("k8s/base/networkpolicies.yaml",
     "    - from:\n        - podSelector:\n            matchLabels:\n"
     "              trawl.dev/search-client: \"true\"\n        - namespaceSelector:\n"
     "            matchLabels:\n              trawl.dev/search-client: \"true\"\n      ports:",
     "    - ports:", "NetworkPolicy/trawl-query-ingress: admits its ports from anywhere"),
    ("terraform/main.tf", "  bucket_name     = var.bucket_name\n", "",
     "required variable bucket_name is not passed"),
    ("terraform/variables.tf", 'description = "AWS region of the bucket, the Kafka cluster and the roles."', "",
     "variable region has no description"),
    ("terraform/outputs.tf", 'output "stage_role_arns"', 'output "role_arns"',
     "outputs the k8s overlays need are missing"),
    ("terraform/modules/iam/main.tf", "var.namespace", "var.k8s_namespace",
     "var.k8s_namespace is used but not declared"),
]


def self_test(trawl):
    """Applies each mutation to a copy of the tree and requires the checks to catch it."""
    failures = 0
    for path, old, new, expect in MUTATIONS:
        with tempfile.TemporaryDirectory() as tmp:
            for part in ("k8s", "terraform"):
                shutil.copytree(os.path.join(ROOT, part), os.path.join(tmp, part))
            target = os.path.join(tmp, path)
            text = open(target).read()
            if old not in text:
                print(f"self-test: {path} no longer contains {old!r}: update the mutation", file=sys.stderr)
                failures += 1
                continue
            open(target, "w").write(text.replace(old, new, 1))
            found = check(tmp, trawl, quiet=True)
            if not any(expect in p for p in found):
                print(f"self-test: {path}: {old!r} -> {new!r} not caught (wanted {expect!r}); got {found}",
                      file=sys.stderr)
                failures += 1
    print(f"self-test: {len(MUTATIONS) - failures}/{len(MUTATIONS)} planted mistakes caught")
    return failures == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trawl", required=True, help="the trawl binary (checks trawl.toml)")
    ap.add_argument("--self-test", action="store_true",
                    help="also plant known mistakes in a copy and require each to be caught")
    args = ap.parse_args()
    found = check(ROOT, args.trawl)
    for p in found:
        print(f"problem: {p}", file=sys.stderr)
    ok = not found
    if args.self_test:
        ok = self_test(args.trawl) and ok
    if not ok:
        sys.exit(1)
    print("deployment checks: ok")


if __name__ == "__main__":
    main()
