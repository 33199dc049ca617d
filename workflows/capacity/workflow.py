"""`CapacityLedgerWorkflow`: the GPU ledger of one cluster, id `capacity/<ClusterDeployment>`
(`models.identity`: the ClusterDeployment's name is injective across organizations).

It owns the pure `models.capacity.CapacityLedger` of the cluster and is the only writer of it, so
two workspaces are never admitted onto the same GPUs, however their requests race: it runs in the
kit's single-writer mode (`workflows.kit.service`): messages are handled one at a time, in
arrival order, each exactly once (request ids), and its whole typed state
(`models.workspace_api.CapacityWorkflowState`: the ledger with every request's reply address, the
ports, the messages not yet handled) is carried across continue-as-new, which may happen between
any two messages.

It also owns the cluster's share of the tenant gateway's TCP port pool (`ports`, `release_ports`):
the same single writer, so two workspaces deployed at once never get the same listener port.

Messages (signal `capacity`, `models.workspace_api.CapacityMessage`): a workspace asks for GPUs
(`request`, answered by the signal `capacity_answer` to `reply_to` now, and once more when it is
admitted after waiting or displaced by a forced scale-down), gives them back (`release`), a
service or the cluster's workflow says the GPUs changed (`changed`: the inventory is read again),
or the cluster is gone (`close`). `refresh` and `capacity_changed` (from any service; the
contract is `workflows/capacity/__init__.py`) read the inventory too, between two messages.

Positions are not pushed: a waiting workspace hears nothing while others are admitted or leave, so
its history does not grow with the line's movement. Whoever wants a position asks (query
`answers`: worked out from the request's ticket, O(log n)). A release costs the same number of
events at any depth: the admitted workspaces are signalled straight from this workflow (external
signals, not awaited one after another), plus one `gpu_holders` signal to the cluster's workflow,
so its validator refuses a scale-down that would take GPUs a running workspace holds. A workspace
that is gone when signalled (terminated) has its request released.

Started on demand by the first workspace that needs GPUs on the cluster (signal-with-start, from
the `signal_with_start` activity), it waits for messages without timers: an idle ledger costs no
history, and a busy one continues as new between messages.
"""

from __future__ import annotations

from temporalio import workflow

from workflows import metrics
from workflows.kit.engine import Refresh, is_failure, reason_of
from workflows.kit.run_limit import RunLimit
from workflows.kit.service import Service
from workflows.workspace_calls import READ_GPU_INVENTORY

with workflow.unsafe.imports_passed_through():
    from models.activity_api import KubeconfigRef
    from models.capacity import (
        CapacityAnswer,
        CapacityLedger,
        CapacityLedgerState,
        Decision,
        GpuHolder,
        LedgerChanges,
    )
    from models.cluster import DEFAULT_NAMESPACE, kubeconfig_secret_name
    from models.signals import RefreshRequest
    from models.workspace_api import (
        STATUS_WAITING_SHOWN,
        CapacityAnswers,
        CapacityAnswersQuery,
        CapacityLedgerInput,
        CapacityLedgerStatus,
        CapacityMessage,
        CapacityMessageKind,
        CapacityWorkflowState,
        GpuHoldersMessage,
        HoldingsQuery,
        LedgerHoldings,
        PortsAnswer,
        ReadGpuInventoryRequest,
    )
    from workflows.capacity import CAPACITY
    from workflows.cluster import CLUSTER
    from workflows.workspace import WORKSPACE


@workflow.defn(name=CAPACITY.workflow_type)
class CapacityLedgerWorkflow:
    """The GPU ledger of one cluster (see the module docstring)."""

    @workflow.init
    def __init__(self, input: CapacityLedgerInput) -> None:
        self._cluster = input.cluster
        # Known once the inventory is read: from the ClusterDeployment's ownership marks, checked
        # to name this very ClusterDeployment's cluster (never guessed from a name).
        self._cluster_workflow_id = input.cluster_workflow_id
        self._kubeconfig = input.kubeconfig or KubeconfigRef(
            namespace=DEFAULT_NAMESPACE, secret_name=kubeconfig_secret_name(input.cluster)
        )
        self._state = input.state or CapacityWorkflowState(
            ledger=CapacityLedgerState(cluster=input.cluster)
        )
        self._ledger = CapacityLedger(self._state.ledger)
        self._limit = RunLimit(input.continue_as_new)
        self._service = Service(self._state.inbox, self._limit)
        self._inventory_look = Refresh(self._state, self._service.request_ids, self._read_inventory)
        self._closed = False
        self._holders: list[GpuHolder] | None = None
        """The holders last published in this run (a new run publishes them again once)."""
        self._holders_sent = 0

    # --- Messages in ---------------------------------------------------------------------------

    @workflow.signal(name=CAPACITY.capacity.name)
    def capacity(self, message: CapacityMessage) -> None:
        """A request, a release, a change of the cluster's GPUs, or the end (see the module doc)."""
        self._service.post(message, message.request_id)

    @workflow.signal(name=CAPACITY.refresh.name)
    def refresh(self, request: RefreshRequest) -> None:
        """Read the cluster's GPU inventory again."""
        self._inventory_look.ask(request.request_id)

    @workflow.signal(name=CAPACITY.capacity_changed.name)
    def capacity_changed(self, request: RefreshRequest) -> None:
        """Another service says the cluster's GPUs changed (a device plugin, a maintenance tool):
        read the inventory again, and admit whoever now fits, in order."""
        self.refresh(request)

    @workflow.query(name=CAPACITY.status.name)
    def status(self) -> CapacityLedgerStatus:
        """Inventory, holders and the head of each queue."""
        ledger = self._ledger
        lengths = ledger.queue_lengths()
        return CapacityLedgerStatus(
            cluster=self._cluster,
            nodes=ledger.nodes,
            holders=ledger.holders_on_nodes(node.name for node in ledger.nodes),
            waiting=[
                answer
                for key in sorted(lengths)
                for answer in ledger.queue(key, limit=STATUS_WAITING_SHOWN)
            ],
            queues=lengths,
            free=ledger.free(),
        )

    @workflow.query(name=CAPACITY.answers.name)
    def answers(self, query: CapacityAnswersQuery) -> CapacityAnswers:
        """Where requests stand now, positions worked out from their tickets (O(log n) each)."""
        ledger = self._ledger
        ids = [
            *query.request_ids,
            *(rid for w in query.workspaces if (rid := ledger.workspace_request(w)) is not None),
        ]
        return CapacityAnswers(
            answers=[answer for rid in ids if (answer := ledger.answer(rid)) is not None]
        )

    @workflow.query(name=CAPACITY.holdings.name)
    def holdings(self, query: HoldingsQuery) -> LedgerHoldings:
        """What one workspace holds: its live request, only when that request answers the
        workspace's own workflow (the mark the ledger keeps), and its gateway ports."""
        ledger = self._ledger
        request_id = ledger.workspace_request(query.workspace)
        requests = []
        if request_id is not None and ledger.reply_to(request_id) == query.reply_to:
            answer = ledger.answer(request_id)
            if answer is not None:
                requests.append(answer)
        prefix = f"{query.workspace}/"
        ports = {
            holder.removeprefix(prefix): int(port)
            for port, holder in self._state.ports.items()
            if holder.startswith(prefix)
        }
        return LedgerHoldings(requests=requests, ports=ports)

    # --- The loop ------------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: CapacityLedgerInput) -> CapacityLedgerStatus:
        """Handle messages one at a time until the cluster is gone."""
        await self._service.serve(
            self._handle,
            closed=lambda: self._closed,
            carry=lambda: CapacityLedgerInput(
                cluster=self._cluster,
                cluster_workflow_id=self._cluster_workflow_id,
                kubeconfig=self._kubeconfig,
                state=self._state.model_copy(update={"ledger": self._ledger.snapshot()}),
                continue_as_new=self._limit.policy,
            ),
            chore=self._inventory_look.chore(),
            caught_up=self._caught_up,
        )
        metrics.workspaces_waiting(self._cluster, 0)
        return self.status()

    def _caught_up(self) -> None:
        """Nothing left to handle (or the run ends): the cluster hears who holds GPUs, if that
        changed, and the waiting gauge is set."""
        self._publish_holders()
        metrics.workspaces_waiting(self._cluster, self._ledger.waiting_count())

    async def _handle(self, message: CapacityMessage) -> None:
        ledger = self._ledger
        match message.kind:
            case CapacityMessageKind.REQUEST if message.request is not None:
                if not self._state.inventory_loaded:
                    await self._read_inventory()
                if not self._state.inventory_loaded:
                    # Without an inventory no answer is honest but "not now": the request waits
                    # in the inbox order for the next refresh (the cluster may still be starting).
                    self._answer(
                        message.reply_to,
                        CapacityAnswer(
                            request_id=message.request.request_id,
                            workspace=message.request.workspace,
                            decision=Decision.INFEASIBLE,
                            message=f"cannot read the GPU inventory of cluster '{self._cluster}'",
                        ),
                    )
                    return
                result = ledger.request(message.request, reply_to=message.reply_to)
                self._answer(message.reply_to, result.answer)
                self._tell(result.changes)
            case CapacityMessageKind.RELEASE:
                released = ledger.release(message.target, message.reason or "released")
                self._tell(released.changes)
            case CapacityMessageKind.CHANGED:
                await self._read_inventory()
            case CapacityMessageKind.CLOSE:
                self._closed = True
            case CapacityMessageKind.PORTS:
                self._allocate_ports(message)
            case CapacityMessageKind.RELEASE_PORTS:
                prefix = f"{message.holder}/"
                self._state.ports = {
                    p: h for p, h in self._state.ports.items() if not h.startswith(prefix)
                }
            case _:
                workflow.logger.warning(
                    "ignored a malformed capacity message %s", message.request_id
                )

    def _allocate_ports(self, message: CapacityMessage) -> None:
        """One pool port per endpoint: the one it holds already, else the lowest free."""
        held = {holder: int(port) for port, holder in self._state.ports.items()}
        in_use = {int(port) for port in self._state.ports} | set(message.taken)
        answer = PortsAnswer(request_id=message.request_id)
        for endpoint in message.endpoints:
            key = f"{message.holder}/{endpoint}"
            port = held.get(key)
            if port is None:
                port = next((p for p in sorted(message.pool) if p not in in_use), None)
            if port is None:
                answer.exhausted.append(endpoint)
                continue
            self._state.ports[str(port)] = key
            in_use.add(port)
            answer.ports[endpoint] = port
        if message.reply_to:
            self._service.send(WORKSPACE.ports_answer, message.reply_to, answer)

    async def _read_inventory(self) -> None:
        try:
            inventory = await READ_GPU_INVENTORY(
                ReadGpuInventoryRequest(
                    kubeconfig=self._kubeconfig, cluster_deployment=self._cluster
                )
            )
        except Exception as error:
            if not is_failure(error):
                raise
            workflow.logger.warning(
                "GPU inventory of %s not read: %s", self._cluster, reason_of(error)
            )
            return
        if inventory.cluster_workflow_id:
            # An organization's cluster is `cluster/<org>/<name>`: not derivable from the
            # ClusterDeployment's name, so read from its marks (checked by the activity).
            self._cluster_workflow_id = inventory.cluster_workflow_id
        changes = self._ledger.capacity_changed(inventory.nodes)
        self._state.inventory_loaded = True
        self._tell(changes)

    def _tell(self, changes: LedgerChanges) -> None:
        """One message per admitted or displaced workspace; those still waiting hear nothing."""
        for answer in [*changes.admitted, *changes.displaced]:
            self._answer(self._ledger.reply_to(answer.request_id), answer)

    def _answer(self, reply_to: str, answer: CapacityAnswer) -> None:
        if not reply_to:
            return
        # A held or waiting request whose workspace is gone (terminated without releasing) would
        # hold its GPUs or its place forever: release it, in inbox order, as a message.
        gone = (
            CapacityMessage(
                request_id=f"{answer.request_id}/gone",
                kind=CapacityMessageKind.RELEASE,
                target=answer.request_id,
                reason="its workspace is gone",
            )
            if answer.decision in (Decision.ADMITTED, Decision.WAITING)
            else None
        )
        self._service.send(
            WORKSPACE.capacity_answer,
            reply_to,
            answer,
            gone=(gone, gone.request_id) if gone is not None else None,
        )

    def _publish_holders(self) -> None:
        holders = self._ledger.holders_on_nodes(node.name for node in self._ledger.nodes)
        if holders == self._holders or not self._cluster_workflow_id:
            return
        self._holders = holders
        self._holders_sent += 1
        info = workflow.info()
        message = GpuHoldersMessage(
            # Unique and deterministic: this run, and the count of updates it sent.
            request_id=f"{info.workflow_id}/{info.run_id}/holders/{self._holders_sent}",
            holders=holders,
        )
        self._service.send(CLUSTER.gpu_holders, self._cluster_workflow_id, message)
