"""rmqtool: an offline toolkit for Apache RocketMQ broker stores."""

__version__ = "0.1.0"
