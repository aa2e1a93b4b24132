"""FastStream's access log for RocketMQ subscribers: topic, group and message id."""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from faststream._internal.logger import DefaultLoggerStorage, make_logger_state
from faststream._internal.logger.logging import get_broker_logger

if TYPE_CHECKING:
    from faststream._internal.basic_types import LoggerProto
    from faststream._internal.context import ContextRepo

__all__ = ["make_rocket_logger_state"]


class RocketParamsStorage(DefaultLoggerStorage):
    def __init__(self) -> None:
        super().__init__()
        self._topic_len = 4
        self._group_len = 4
        self.logger_log_level = logging.INFO

    def set_level(self, level: int) -> None:
        self.logger_log_level = level

    def register_subscriber(self, params: dict[str, Any]) -> None:
        self._topic_len = max(self._topic_len, len(params.get("topic", "")))
        self._group_len = max(self._group_len, len(params.get("group", "")))

    def get_logger(self, *, context: ContextRepo) -> LoggerProto:
        if logger := self._get_logger_ref():
            return logger
        logger = get_broker_logger(
            name="rocketmq",
            default_context={"topic": "", "group": ""},
            message_id_ln=32,
            fmt=(
                "%(asctime)s %(levelname)-8s - "
                f"%(topic)-{self._topic_len}s | %(group)-{self._group_len}s | "
                "%(message_id)-32s - %(message)s"
            ),
            context=context,
            log_level=self.logger_log_level,
        )
        self._logger_ref.add(logger)
        return logger


make_rocket_logger_state = partial(make_logger_state, default_storage_cls=RocketParamsStorage)
