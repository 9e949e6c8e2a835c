// Package fuzz holds Axon's fuzz targets: key encodings (round trip and
// order), decoders of engine records, and request evaluation end to end
// through core.Node over the in-memory engine. Run them with make fuzz.
package fuzz
