"""A page that translates in the browser with onnxruntime-web (`export web`) and its static Space."""

from .page import add_web_format, export_web
from .space import add_static_space_to_push, write_static_space

__all__ = ["add_static_space_to_push", "add_web_format", "export_web", "write_static_space"]
