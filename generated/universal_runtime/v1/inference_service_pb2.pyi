from universal_runtime.v1 import anomaly_pb2 as _anomaly_pb2
from universal_runtime.v1 import documents_pb2 as _documents_pb2
from universal_runtime.v1 import encoders_pb2 as _encoders_pb2
from universal_runtime.v1 import generation_pb2 as _generation_pb2
from universal_runtime.v1 import images_pb2 as _images_pb2
from universal_runtime.v1 import ocr_pb2 as _ocr_pb2
from universal_runtime.v1 import speech_pb2 as _speech_pb2
from universal_runtime.v1 import tokenization_pb2 as _tokenization_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
