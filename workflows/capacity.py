"""`CapacityLedgerWorkflow`: the GPU ledger of one cluster, id `capacity/<ClusterDeployment>`
(`models.identity`: the ClusterDeployment's name is injective across organizations).

It owns the pure `models.capacity.CapacityLedger` of the cluster and is the only writer of it, so
two workspaces are never admitted onto the same GPUs, however their requests race: messages are
handled one at a time, in arrival order, each exactly once (request ids), and the ledger's state
is carried whole across continue-as-new.

It also owns the cluster's share of the tenant gateway's TCP port pool (`ports`, `release_ports`):
the same single writer, so two workspaces deployed at once never get the same listener port.

Messages (signal `capacity`, `models.workspace_api.CapacityMessage`): a workspace asks for GPUs
(`request`, answered by the signal `capacity_answer` to `reply_to`, now and on every later change:
admitted after waiting, moved in the queue, displaced by a forced scale-down), gives them back
(`release`), a service or the cluster's workflow says the GPUs changed (`changed`: the inventory is
read again), or the cluster is gone (`close`). `refresh` and `capacity_changed` (models.signals,
from any service) read the inventory too.
After every change, the cluster's workflow gets the holders per node (signal `gpu_holders`), so its
validator refuses a scale-down that would take GPUs a running workspace holds.

Started on demand by the first workspace that needs GPUs on the cluster (signal-with-start, from
the `signal_with_start` activity), it waits for messages without timers: an idle ledger costs no
history, and a busy one continues as new between messages.
"""

from __future__ import annotations

from temporalio import workflow

from workflows import metrics
from workflows.engine import RequestIds, is_failure, reason_of
from workflows.workspace_calls import READ_GPU_INVENTORY, SIGNAL_WORKFLOW

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
    from models.operations import OperationBook
    from models.signals import RefreshRequest, SignalName
    from models.workspace_api import (
        CapacityLedgerInput,
        CapacityLedgerStatus,
        CapacityMessage,
        CapacityMessageKind,
        GpuHoldersMessage,
        PortsAnswer,
        ReadGpuInventoryRequest,
        SignalWorkflowRequest,
        WorkspaceSignal,
    )

CAPACITY_SIGNAL = "capacity"
GPU_HOLDERS_SIGNAL = "gpu_holders"
CONTINUE_AS_NEW_EVENTS = 4_000


@workflow.defn
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
        state = (
            CapacityLedgerState.model_validate(input.state)
            if input.state
            else CapacityLedgerState(cluster=input.cluster)
        )
        self._ledger = CapacityLedger(state)
        self._book = OperationBook.model_validate(input.book) if input.book else OperationBook()
        self._ids = RequestIds(self._book)
        self._replies: dict[str, str] = dict(input.replies)
        self._ports: dict[str, str] = dict(input.ports)
        self._loaded = input.inventory_loaded
        self._inbox: list[CapacityMessage] = []
        self._refresh = False
        self._closed = False
        self._holders: list[GpuHolder] | None = None

    # --- Messages in ---------------------------------------------------------------------------

    @workflow.signal(name=CAPACITY_SIGNAL)
    def capacity(self, message: CapacityMessage) -> None:
        """A request, a release, a change of the cluster's GPUs, or the end (see the module doc)."""
        if self._ids.first_time(message.request_id):
            self._inbox.append(message)

    @workflow.signal(name=SignalName.REFRESH)
    def refresh(self, request: RefreshRequest) -> None:
        """Read the cluster's GPU inventory again."""
        if self._ids.first_time(request.request_id):
            self._refresh = True

    @workflow.signal(name=SignalName.CAPACITY_CHANGED)
    def capacity_changed(self, request: RefreshRequest) -> None:
        """Another service says the cluster's GPUs changed (a device plugin, a maintenance tool):
        read the inventory again, and admit whoever now fits, in order."""
        self.refresh(request)

    @workflow.query
    def status(self) -> CapacityLedgerStatus:
        """Inventory, holders and queues."""
        ledger = self._ledger
        waiting = [ledger.answer(w.request.request_id) for w in ledger.state.waiting]
        return CapacityLedgerStatus(
            cluster=self._cluster,
            nodes=ledger.state.nodes,
            holders=ledger.holders_on_nodes(node.name for node in ledger.state.nodes),
            waiting=[answer for answer in waiting if answer is not None],
            free=ledger.free(),
        )

    # --- The loop ------------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: CapacityLedgerInput) -> CapacityLedgerStatus:
        """Handle messages one at a time until the cluster is gone."""
        while not self._closed:
            await workflow.wait_condition(
                lambda: bool(self._inbox) or self._refresh or self._history_is_long()
            )
            if self._refresh:
                self._refresh = False
                await self._read_inventory()
            while self._inbox and not self._closed:
                await self._handle(self._inbox.pop(0))
            await self._publish_holders()
            metrics.workspaces_waiting(self._cluster, len(self._ledger.state.waiting))
            if self._history_is_long() and not self._inbox:
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._inbox:
                    workflow.continue_as_new(self._carry())
        metrics.workspaces_waiting(self._cluster, 0)
        return self.status()

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or (
            info.get_current_history_length() > CONTINUE_AS_NEW_EVENTS
        )

    def _carry(self) -> CapacityLedgerInput:
        return CapacityLedgerInput(
            cluster=self._cluster,
            cluster_workflow_id=self._cluster_workflow_id,
            kubeconfig=self._kubeconfig,
            inventory_loaded=self._loaded,
            state=self._ledger.state.model_dump(mode="json"),
            book=self._book.model_dump(mode="json"),
            replies=self._replies,
            ports=self._ports,
        )

    async def _handle(self, message: CapacityMessage) -> None:
        ledger = self._ledger
        match message.kind:
            case CapacityMessageKind.REQUEST if message.request is not None:
                if message.reply_to:
                    self._replies[message.request.request_id] = message.reply_to
                if not self._loaded:
                    await self._read_inventory()
                if not self._loaded:
                    # Without an inventory no answer is honest but "not now": the request waits
                    # in the inbox order for the next refresh (the cluster may still be starting).
                    await self._answer(
                        CapacityAnswer(
                            request_id=message.request.request_id,
                            workspace=message.request.workspace,
                            decision=Decision.INFEASIBLE,
                            message=f"cannot read the GPU inventory of cluster '{self._cluster}'",
                        )
                    )
                    return
                result = ledger.request(message.request)
                await self._answer(result.answer)
                await self._tell(result.changes)
            case CapacityMessageKind.RELEASE:
                released = ledger.release(message.target, message.reason or "released")
                await self._tell(released.changes)
            case CapacityMessageKind.CHANGED:
                await self._read_inventory()
            case CapacityMessageKind.CLOSE:
                self._closed = True
            case CapacityMessageKind.PORTS:
                await self._allocate_ports(message)
            case CapacityMessageKind.RELEASE_PORTS:
                prefix = f"{message.holder}/"
                self._ports = {p: h for p, h in self._ports.items() if not h.startswith(prefix)}
            case _:
                workflow.logger.warning(
                    "ignored a malformed capacity message %s", message.request_id
                )

    async def _allocate_ports(self, message: CapacityMessage) -> None:
        """One pool port per endpoint: the one it holds already, else the lowest free."""
        held = {holder: int(port) for port, holder in self._ports.items()}
        in_use = {int(port) for port in self._ports} | set(message.taken)
        answer = PortsAnswer(request_id=message.request_id)
        for endpoint in message.endpoints:
            key = f"{message.holder}/{endpoint}"
            port = held.get(key)
            if port is None:
                port = next((p for p in sorted(message.pool) if p not in in_use), None)
            if port is None:
                answer.exhausted.append(endpoint)
                continue
            self._ports[str(port)] = key
            in_use.add(port)
            answer.ports[endpoint] = port
        if message.reply_to:
            await SIGNAL_WORKFLOW(
                SignalWorkflowRequest(
                    workflow_id=message.reply_to,
                    signal=WorkspaceSignal.PORTS_ANSWER,
                    payload=answer.model_dump(mode="json"),
                )
            )

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
        self._loaded = True
        await self._tell(changes)

    async def _tell(self, changes: LedgerChanges) -> None:
        for answer in [*changes.admitted, *changes.displaced, *changes.moved]:
            await self._answer(answer)

    async def _answer(self, answer: CapacityAnswer) -> None:
        reply_to = self._replies.get(answer.request_id)
        if not reply_to:
            return
        if answer.decision in (Decision.RELEASED, Decision.INFEASIBLE):
            self._replies.pop(answer.request_id, None)
        delivered = await SIGNAL_WORKFLOW(
            SignalWorkflowRequest(
                workflow_id=reply_to,
                signal=WorkspaceSignal.CAPACITY_ANSWER,
                payload=answer.model_dump(mode="json"),
            )
        )
        if not delivered.delivered:
            # The workspace is gone without releasing (terminated): free what it held.
            self._replies.pop(answer.request_id, None)
            changes = self._ledger.release(answer.request_id, "its workspace is gone").changes
            await self._tell(changes)

    async def _publish_holders(self) -> None:
        holders = self._ledger.holders_on_nodes(node.name for node in self._ledger.state.nodes)
        if holders == self._holders or not self._cluster_workflow_id:
            return
        self._holders = holders
        # Unique and deterministic: the history length at the moment it is sent.
        sent_at = workflow.info().get_current_history_length()
        message = GpuHoldersMessage(
            request_id=f"{workflow.info().workflow_id}/holders/{sent_at}", holders=holders
        )
        await SIGNAL_WORKFLOW(
            SignalWorkflowRequest(
                workflow_id=self._cluster_workflow_id,
                signal=GPU_HOLDERS_SIGNAL,
                payload=message.model_dump(mode="json"),
            )
        )
