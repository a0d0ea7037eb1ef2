"""The ground floor: what every layer may import (errors, request keys, each design's vocabulary, the
coding of responses, the package version)."""
