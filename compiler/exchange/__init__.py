"""The field's exchange formats: ONNX networks read as daic networks (`daic import`), VNN-LIB properties
read (`daic verify --vnnlib`) and written (`daic export --vnnlib`)."""
