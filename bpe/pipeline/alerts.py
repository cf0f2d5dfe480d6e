"""Alerts: Prefect automations per `train-bpe` deployment that POST a message to a webhook when one
of its flow runs fails or crashes, and when a version it publishes treats languages less equally
than the promoted one did (its Gini coefficient on the configured dev set rose by more than
`evaluation.gini_margin`). `bpe deploy` sets them up (flows/deploy.py).

What is created, for deployment `train-bpe/<name>`, both found again by name, so that deploying
again updates them in place rather than adding a second automation:

- a notification block `bpe-alert-<name>` (Prefect's `CustomWebhookNotificationBlock`): a JSON POST of
  `{"subject": ..., "body": ..., "text": subject + newline + body}` to the webhook (`text` is what
  Slack, Mattermost and similar incoming webhooks show). The URL is kept among the block's secrets,
  since a webhook's path is often its only credential;
- an automation `train-bpe/<name>: failed or crashed run`: a reactive trigger on the events
  `prefect.flow-run.Failed` and `prefect.flow-run.Crashed` of flow runs related to that deployment
  (by its id), whose action sends the block a message naming the deployment, the flow run, its state
  and its state message. A run that fails on bad data has the error line naming the shard in that
  message (`Flow run encountered an exception: InputError: .../part-00004.parquet: no column 'text'`).

Why one automation per deployment rather than one for every train-bpe run: each configuration may
name its own webhook (the team that owns a tokenizer hears of its failures), an alert is removed
with its configuration's `alerts` key, and the trigger matches the deployment by id, so a run of the
flow outside the deployments (`bpe demo`, a test) alerts nobody.

A Gini rise is not a failure (the version is published as usual, and a team may promote it on
purpose): the run emits an event, `bpe.evaluation.evaluate.gini-rose`, related to its flow run and deployment,
with the message in its payload, and a second automation, `train-bpe/<name>: Gini rose`, sends that
message to the same webhook.

The automations are evaluated by the Prefect server (its triggers and actions services, on by default
in `prefect server start`): the server sends the POST, so the webhook must be reachable from it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from bpe.errors import SettingsError
from bpe.pipeline.config import TokenizerConfig, check_webhook_url, redact_url

ENV = "BPE_ALERT_WEBHOOK"  # a webhook for every configuration that names none
EVENTS = ("prefect.flow-run.Failed", "prefect.flow-run.Crashed")
GINI_EVENT = "bpe.evaluation.evaluate.gini-rose"  # emitted by a run whose version's Gini rose past the margin

# Rendered by the server (Jinja, with the flow run read back from the API when the event arrives);
# <deployment> is filled in here, when the automation is made.
SUBJECT = "<deployment>: flow run {{ flow_run.name }} {{ flow_run.state.name | lower }}"
BODY = (
    "Deployment <deployment>: flow run {{ flow_run.name }} ({{ flow_run.id }}) "
    "{{ flow_run.state.name }} at {{ flow_run.state.timestamp }}.\n"
    "{{ flow_run.state.message or '(no state message)' }}\n"
    "Configuration: {{ flow_run.parameters.config }}; logs: prefect flow-run logs {{ flow_run.id }}"
)


def webhook_for(cfg: TokenizerConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The webhook this configuration's failures go to: its `alerts.webhook`, else BPE_ALERT_WEBHOOK,
    else None. A malformed BPE_ALERT_WEBHOOK is a one-line SettingsError naming the variable."""
    if cfg.alerts.webhook:
        return cfg.alerts.webhook
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not value:
        return None
    try:
        return check_webhook_url(value)
    except SettingsError as exc:
        raise SettingsError(f"{ENV}: {exc}") from None


# The Gini alert's message is the run's own (the event's payload); <deployment> as above.
GINI_SUBJECT = "<deployment>: Gini rose in {{ event.payload.version }}"
GINI_BODY = (
    "Deployment <deployment>: {{ event.payload.message }}\n"
    "Flow run {{ event.payload.flow_run_name }} ({{ event.payload.flow_run_id }}); the version is published "
    "(latest: {{ event.payload.latest }}): bpe rollback or bpe promote decide which one serves."
)


def automation_name(deployment: str) -> str:
    """The automation's name, by which deploying again finds it: `train-bpe/en: failed or crashed run`."""
    return f"{deployment}: failed or crashed run"


def gini_automation_name(deployment: str) -> str:
    """The Gini alert's automation: `train-bpe/en: Gini rose`."""
    return f"{deployment}: Gini rose"


def block_name(name: str) -> str:
    """The notification block's name (block names allow lowercase letters, digits and dashes)."""
    return "bpe-alert-" + re.sub(r"[^a-z0-9-]", "-", name.lower())


def ensure_alert(client: Any, deployment_id: UUID, deployment: str, name: str, webhook: str) -> str:
    """Create or update the webhook block and the automations for one deployment (`client`: Prefect's
    sync client): its failed or crashed runs, and its versions whose Gini rose. Returns "created" or
    "updated" (the failure automation's); never leaves two automations of the same name."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.events.actions import SendNotification
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

    block = CustomWebhookNotificationBlock(
        name=automation_name(deployment),
        url="{{webhook}}",  # filled from `secrets` when the message is sent
        secrets={"webhook": webhook},
        method="POST",
        json_data={"subject": "{{subject}}", "body": "{{body}}", "text": "{{subject}}\n{{body}}"},
    )
    block_id = block.save(block_name(name), overwrite=True)

    def notifying(name: str, description: str, events: set[str], resource: str, subject: str, body: str):
        """An automation that sends the webhook block a message on `events` of `resource` related
        to this deployment."""
        return AutomationCore(
            name=name,
            description=description,
            tags=["bpe"],
            trigger=EventTrigger(
                expect=events,
                match={"prefect.resource.id": resource},
                match_related={"prefect.resource.id": f"prefect.deployment.{deployment_id}"},
                posture=Posture.Reactive,
                threshold=1,
                within=0,
            ),
            actions=[
                SendNotification(
                    block_document_id=block_id,
                    subject=subject.replace("<deployment>", deployment),
                    body=body.replace("<deployment>", deployment),
                )
            ],
        )

    automation = notifying(
        automation_name(deployment),
        f"Notify {redact_url(webhook)} when a run of {deployment} fails or crashes (set up by bpe deploy).",
        set(EVENTS),
        "prefect.flow-run.*",
        SUBJECT,
        BODY,
    )
    gini = notifying(
        gini_automation_name(deployment),
        f"Notify {redact_url(webhook)} when a version {deployment} publishes has a Gini coefficient above the "
        "promoted version's by more than evaluation.gini_margin (set up by bpe deploy).",
        {GINI_EVENT},
        "bpe.tokenizer.*",
        GINI_SUBJECT,
        GINI_BODY,
    )
    put_automation(client, gini_automation_name(deployment), gini)
    return put_automation(client, automation_name(deployment), automation)


def put_automation(client: Any, name: str, automation: Any) -> str:
    """Create the automation `name`, or update the one of that name in place: "created" or "updated"."""
    existing = client.read_automations_by_name(name)
    for extra in existing[1:]:  # newest first; only a race of two deploys could have made more
        client.delete_automation(extra.id)
    if existing:
        client.update_automation(existing[0].id, automation)
        return "updated"
    client.create_automation(automation)
    return "created"


def send_gini_alert(name: str, version: str, message: str, **details: str) -> None:
    """Emit the event the Gini automation of this run's deployment sends on (`details`: the flow
    run's name and id, which version is latest). Inside a flow run, Prefect relates the event to
    the run and its deployment; a run outside a deployment alerts nobody."""
    from prefect.events import emit_event

    emit_event(
        event=GINI_EVENT,
        resource={"prefect.resource.id": f"bpe.tokenizer.{name}", "prefect.resource.name": name},
        payload={"version": version, "message": message, **details},
    )


def remove_alert(client: Any, deployment: str, name: str) -> bool:
    """Delete the automations and block of a deployment whose configuration no longer asks for
    alerts (so that removing the key stops the messages); True if there was one."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.exceptions import ObjectNotFound

    existing = client.read_automations_by_name(automation_name(deployment))
    for automation in [*existing, *client.read_automations_by_name(gini_automation_name(deployment))]:
        client.delete_automation(automation.id)
    try:
        slug = CustomWebhookNotificationBlock.get_block_type_slug()
        document = client.read_block_document_by_name(block_name(name), block_type_slug=slug, include_secrets=False)
    except ObjectNotFound:
        return bool(existing)
    client.delete_block_document(document.id)
    return True
