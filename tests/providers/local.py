"""A Terraform/OpenTofu provider that manages local files, for envc's tests of `resource` nodes.

It is written with PyPI's tfprovider (0.1.1.post1): an implementation of tfplugin6's server
side independent of HashiCorp's Go SDKs, so that envc's client (crate tfplugin) is tested
against a second reading of the protocol, not only its own. scripts/tf-providers installs it
(registry.envc.test/envc-test/local 0.1.0) and pins the library.

Provider `local`, protocol 6. Its configuration has one optional attribute:
    root             string: when set (an absolute path), every file must lie under it, so a
                     test cannot write outside its temporary directory by mistake.
Resource `local_file`, like hashicorp/local's:
    filename         string, required: the file's absolute path. A change replaces the file.
    content          string, required, sensitive: what the file holds (UTF-8).
    file_permission  string, optional and computed: octal, "0644" if not set ("644" and
                     "0644" are both accepted and kept as written). A change is made in place
                     (chmod), not by replacement.
    id               string, computed: the hex SHA-1 of content (as hashicorp/local's id).
    content_sha256   string, computed: the hex SHA-256 of content.
On create, and whenever content changes, the plan leaves id and content_sha256 unknown.
Schema version 0; UpgradeResourceState passes the state through. ImportResourceState takes
the file's absolute path as the id.

tfprovider supports strings and sets of strings, unrefined unknowns, no private state, and no
data sources. Where it lacks an RPC or answers wrongly, LocalServicer below overrides the RPC;
site-packages is not patched.

Run as a plugin (go-plugin's handshake): TF_PLUGIN_MAGIC_COOKIE must hold Terraform's cookie,
as a Go plugin requires; the first line on stdout is `1|6|tcp|127.0.0.1:PORT|grpc|CERT`, CERT
being the base64 (padded) DER of a fresh self-signed RSA-2048 certificate for `localhost`.
Unlike a Go plugin, it listens on TCP, not a unix socket, and ignores PLUGIN_CLIENT_CERT: it
asks for no client certificate. It ends on GRPCController.Shutdown, on SIGTERM or SIGKILL, and
within a second of its parent's death (tfprovider polls getppid).
"""

import hashlib
import json
import os
import re
import signal
import sys
from dataclasses import dataclass, replace

import msgpack
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from hc_go_plugin_server._common import rpc_plugin_server as go_plugin
from tfplugin_proto.tfplugin6_4_pb2 import (
    DynamicValue,
    GetMetadata,
    GetProviderSchema,
    ImportResourceState,
    PlanResourceChange,
    ServerCapabilities,
    StopProvider,
    UpgradeResourceState,
)
from tfprovider.level2.attribute_path import ROOT
from tfprovider.level2.diagnostics import Diagnostics
from tfprovider.level2.wire_format import Unknown, UnrefinedUnknown
from tfprovider.level3.statically_typed_schema import (
    attribute,
    attributes_class,
    serialize_attribute_class_instance_to_dynamic_value,
)
from tfprovider.level4.provider_servicer import Provider, Resource
from tfprovider.level4._sync.provider_servicer import AdapterProviderServicer
from tfprovider.level4.utils import exception_to_diagnostics

MAGIC_COOKIE_KEY = "TF_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2"
PERMISSION = re.compile(r"0?[0-7]{3}")
DEFAULT_PERMISSION = "0644"

# Every attribute may be null (computed ones in a config, everything in a destroy) or unknown
# (a config that refers to what another resource has not made yet): tfprovider maps this
# annotation to the wire type "string".
MaybeStr = str | None | Unknown


def path(name: str):
    return ROOT.attribute_name(name).to_protobuf()


@attributes_class()
class ProviderConfig:
    root: MaybeStr = attribute(
        optional=True,
        description="When set, an absolute directory every local_file must lie under.",
    )


@attributes_class()
class LocalFile:
    filename: MaybeStr = attribute(
        required=True, description="Absolute path of the file. A change replaces it."
    )
    content: MaybeStr = attribute(
        required=True, sensitive=True, description="What the file holds (UTF-8)."
    )
    file_permission: MaybeStr = attribute(
        optional=True,
        computed=True,
        description='Octal permission bits, "0644" when not set; changed in place.',
    )
    id: MaybeStr = attribute(computed=True, description="Hex SHA-1 of content.")
    content_sha256: MaybeStr = attribute(
        computed=True, description="Hex SHA-256 of content."
    )


@dataclass
class ProviderState:
    root: str | None = None


def known(v) -> bool:
    return v is not None and not isinstance(v, Unknown)


def with_digests(state: LocalFile) -> LocalFile:
    data = state.content.encode()
    return replace(
        state,
        id=hashlib.sha1(data).hexdigest(),
        content_sha256=hashlib.sha256(data).hexdigest(),
    )


def same_mode(a: str, b: str) -> bool:
    return int(a, 8) == int(b, 8)


def read_file(filename: str, permission: str | None) -> LocalFile | None:
    """The file as a state, or None if it is gone. `permission` is the spelling to keep when
    the file's mode still matches it, so that "644" in a config is no drift from 0644."""
    try:
        with open(filename, encoding="utf-8", newline="") as f:
            content = f.read()
        mode = os.stat(filename).st_mode & 0o777
    except FileNotFoundError:
        return None
    if not (permission and PERMISSION.fullmatch(permission) and int(permission, 8) == mode):
        permission = f"{mode:04o}"
    return with_digests(LocalFile(filename, content, permission, None, None))


class LocalFileResource(Resource[ProviderState, LocalFile]):
    type_name = "local_file"
    config_type = LocalFile
    schema_version = 0
    block_version = 0
    description = "A file on the provider's machine."

    def validate_resource_config(self, config: LocalFile, diagnostics: Diagnostics) -> None:
        # Unknown values are checked later, in the plan that knows them.
        if isinstance(config.filename, str) and not os.path.isabs(config.filename):
            diagnostics.add_error(
                summary="filename must be an absolute path",
                detail=f"{config.filename!r} is relative.",
                attribute=path("filename"),
            )
        p = config.file_permission
        if isinstance(p, str) and not PERMISSION.fullmatch(p):
            diagnostics.add_error(
                summary="file_permission must be 3 or 4 octal digits",
                detail=f'{p!r} is not, e.g. "0644".',
                attribute=path("file_permission"),
            )

    def plan_resource_change(self, prior_state, config, proposed_new_state, diagnostics):
        # (A destroy plan never gets here: LocalServicer.PlanResourceChange answers it.)
        planned = proposed_new_state
        root = self.provider_state.root
        if root and isinstance(planned.filename, str):
            if os.path.commonpath([root, os.path.normpath(planned.filename)]) != root:
                diagnostics.add_error(
                    summary="filename is outside the provider's root",
                    detail=f"{planned.filename!r} is not under {root!r}.",
                    attribute=path("filename"),
                )
        if planned.file_permission is None:
            planned = replace(planned, file_permission=DEFAULT_PERMISSION)
        if prior_state is None or planned.content != prior_state.content:
            # The digests are the apply's to tell (and an unknown content has none yet).
            planned = replace(planned, id=UnrefinedUnknown(), content_sha256=UnrefinedUnknown())
        if prior_state is not None and planned.filename != prior_state.filename:
            return planned, [ROOT.attribute_name("filename")]
        return planned

    def apply_resource_change(self, prior_state, config, planned_state, diagnostics):
        try:
            if planned_state is None:
                try:
                    os.remove(prior_state.filename)
                except FileNotFoundError:
                    pass
                return None
            new = with_digests(planned_state)
            os.makedirs(os.path.dirname(new.filename), exist_ok=True)
            if prior_state is None or prior_state.content != new.content or not os.path.exists(
                new.filename
            ):
                with open(new.filename, "w", encoding="utf-8", newline="") as f:
                    f.write(new.content)
            os.chmod(new.filename, int(new.file_permission, 8))
            return new
        except OSError as e:
            diagnostics.add_error(
                summary=f"cannot write {e.filename}: {e.strerror}",
                attribute=path("filename"),
            )
            # The state is what it was: the next plan tries again.
            return prior_state

    def read_resource(self, current_state, diagnostics):
        # A file that is gone reads as null: the resource no longer exists (drift).
        return read_file(current_state.filename, current_state.file_permission)

    def upgrade_resource_state(self, state, version, diagnostics):
        raise NotImplementedError("LocalServicer.UpgradeResourceState answers this")

    def import_resource(self, id, diagnostics):
        if not os.path.isabs(id):
            diagnostics.add_error(
                summary="the import id must be the file's absolute path",
                detail=f"{id!r} is relative.",
            )
            return None
        state = read_file(id, None)
        if state is None:
            diagnostics.add_error(summary=f"cannot import {id}: no such file")
        return state


class LocalProvider(Provider[ProviderState, ProviderConfig]):
    config_type = ProviderConfig
    schema_version = 0
    block_version = 0
    resource_factories = [LocalFileResource]

    def __init__(self) -> None:
        self.provider_state = ProviderState()
        super().__init__()

    def adapt(self) -> "LocalServicer":
        return LocalServicer(self)

    def validate_provider_config(self, config: ProviderConfig, diagnostics: Diagnostics) -> None:
        if isinstance(config.root, str) and not os.path.isabs(config.root):
            diagnostics.add_error(
                summary="root must be an absolute path",
                detail=f"{config.root!r} is relative.",
                attribute=path("root"),
            )

    def configure_provider(self, config: ProviderConfig, diagnostics: Diagnostics) -> None:
        # Resources share this object, so what is configured here is what they check.
        self.provider_state.root = (
            os.path.normpath(config.root) if isinstance(config.root, str) else None
        )


# Plans destroys itself (below), so says so: Terraform then asks it to plan a destroy.
CAPABILITIES = ServerCapabilities(plan_destroy=True, get_provider_schema_optional=False)


class LocalServicer(AdapterProviderServicer):
    """tfprovider's servicer, with the RPCs it lacks or gets wrong answered here."""

    def GetMetadata(self, request, context):
        # tfprovider lists no resources and says it cannot plan a destroy.
        return GetMetadata.Response(
            server_capabilities=CAPABILITIES,
            resources=[
                GetMetadata.ResourceMetadata(type_name=n) for n in self.adapted.resources
            ],
        )

    def GetProviderSchema(self, request, context):
        # tfprovider leaves server_capabilities out; Terraform reads them here too.
        response = super().GetProviderSchema(request, context)
        response.server_capabilities.CopyFrom(CAPABILITIES)
        return response

    def PlanResourceChange(self, request, context):
        # tfprovider reads the config as an object even in a destroy, where it is null, and
        # fails: a destroy plans a null state.
        if msgpack.unpackb(request.proposed_new_state.msgpack or b"\xc0") is None:
            return PlanResourceChange.Response(planned_state=DynamicValue(msgpack=b"\xc0"))
        return super().PlanResourceChange(request, context)

    def UpgradeResourceState(self, request, context):
        # tfprovider reads the old state into the current schema's class, which cannot work
        # for an older schema. Version 0 is the only one, so the state passes through, as
        # JSON (Terraform's state file) to msgpack, keeping the current attributes only.
        diagnostics = Diagnostics()
        with exception_to_diagnostics(diagnostics, "upgrading resource state"):
            if not request.raw_state.json:
                raise ValueError("only a JSON raw_state is supported, not flatmap")
            old = json.loads(request.raw_state.json)
            names = ("filename", "content", "file_permission", "id", "content_sha256")
            state = {n: old.get(n) for n in names}
            return UpgradeResourceState.Response(
                upgraded_state=DynamicValue(msgpack=msgpack.packb(state))
            )
        return UpgradeResourceState.Response(diagnostics=diagnostics)

    def ImportResourceState(self, request, context):
        # tfprovider serializes whatever import_resource returns, so a failed import would
        # report a serialization error instead of its own diagnostic.
        diagnostics = Diagnostics()
        with exception_to_diagnostics(diagnostics, "importing resource"):
            resource = self._get_resource_by_name(request.type_name)
            state = resource.import_resource(request.id, diagnostics)
            if state is not None:
                return ImportResourceState.Response(
                    imported_resources=[
                        ImportResourceState.ImportedResource(
                            type_name=request.type_name,
                            state=serialize_attribute_class_instance_to_dynamic_value(state),
                        )
                    ],
                    diagnostics=diagnostics,
                )
        return ImportResourceState.Response(diagnostics=diagnostics)

    def StopProvider(self, request, context):
        # tfprovider leaves it unimplemented; nothing here runs long enough to cancel.
        return StopProvider.Response()


def health_service(server) -> None:
    # go-plugin's client health-checks the service "plugin"; hc_go_plugin_server only
    # registers an example service name, so "plugin" would answer NOT_FOUND.
    servicer = health.HealthServicer()
    servicer.set("plugin", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)


def main() -> None:
    if os.environ.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE:
        # As a Go plugin answers when run by hand.
        sys.stderr.write(
            "This binary is a plugin. These are not meant to be executed directly.\n"
            "Please execute the program that consumes these plugins, which will\n"
            "load any plugins automatically\n"
        )
        sys.exit(1)
    versions = os.environ.get("PLUGIN_PROTOCOL_VERSIONS")
    if versions and "6" not in versions.split(","):
        sys.exit(f"local.py: speaks protocol 6 only, the client asks for {versions}")
    # Like a Go plugin: an interrupt (Ctrl-C to the process group) is the client's to act on,
    # through StopProvider; the process ends when the client kills it or exits.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    go_plugin._configure_health_server = health_service
    LocalProvider().run()


if __name__ == "__main__":
    main()
