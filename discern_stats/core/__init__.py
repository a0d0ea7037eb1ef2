"""The ground floor: what every layer may import (keys; errors and vocabularies move here)."""
