"""What a run's numbers describe, as a person reads it: a device measured, one modeled
(the step model on the virtual clock), or one emulated (the host's side of every step run
for real, the modeled device's time waited out: docs/gil.md).
`show`, `compare` and the report all name a run's device by this."""

from __future__ import annotations

from ..schema.manifest import Manifest


def kind(manifest: Manifest) -> str:
    """"modeled", "emulated" or "measured"."""
    if manifest.modeled:
        return "modeled"
    return "emulated" if manifest.executor_kind == "emulated" else "measured"


def device_name(manifest: Manifest) -> str:
    """The device: a modeled run's profile ("B200"); an emulated run's profile with the host
    that did its work ("H200 (emulated on x86_64: the host's CPU doing its work)"); else
    the device measured ("x86_64", "NVIDIA H100 80GB HBM3"). Runs from before the
    manifest named the profile: the executor's."""
    measured = str((manifest.device or {})["name"])
    which = kind(manifest)
    if which == "measured":
        return measured
    record = manifest.device_profile
    profile = manifest.modeled_device or \
        (record.get("name") if isinstance(record, dict) else None) or manifest.profile
    if which == "modeled":
        return str(profile)
    return f"{profile} (emulated on {measured}: the host's CPU doing its work)"
