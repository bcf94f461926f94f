"""What a method handler is given besides its request: the settings (and the budget they set), the
requests in flight (to ask the client something), the signers of task ids and confirmation states,
and whether the server is shutting down."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import Callable

from ..settings.config import Config
from ..store.interface import InstanceStore
from ..store.memory import MemoryStore
from ..tenants.spend import Budget
from .confirm import RequestStates
from .inflight import InFlight
from .request import Session
from .task_ids import TaskIds


@dataclass
class Context:
    """What the protocol's handlers share in one process: the settings, requests in flight, signed ids."""

    config: Config
    list_changed: bool = False  # the transport tells sessions when the tool list changes
    inflight: InFlight = field(default_factory=InFlight)
    closing: threading.Event = field(default_factory=threading.Event)  # set as a shutdown begins (its grace)
    stopping: threading.Event = field(default_factory=threading.Event)  # set by a draining shutdown
    store: InstanceStore = field(default_factory=MemoryStore)  # the instance's: single-use states
    secret: str = field(init=False, repr=False)  # signs task ids, confirmation states (and HTTP session ids)
    task_ids: TaskIds = field(init=False)
    request_states: RequestStates = field(init=False)
    confirms: bool = field(init=False)  # a tool call may ask the user (a confirmation, a budget passed)
    session_changed: Callable[[Session], None] = lambda _session: None  # a transport keeps what a session set

    def __post_init__(self) -> None:
        self.secret = self.config.session_secret or secrets.token_hex(32)  # stdio: one process, made up
        self.task_ids = TaskIds(self.secret)
        self.request_states = RequestStates(self.secret, self.store)
        self.confirms = self.config.confirm_side_effects != "off" or Budget.of(self.config).asks
