"""Device profiles (published figures, as data) and detection of the present device."""

from .detect import DeviceInfo, detect_device
from .profile import PRECISIONS, DeviceProfile, Figure, known_profiles, load_device_profile

__all__ = ["DeviceInfo", "detect_device", "DeviceProfile", "Figure", "PRECISIONS",
           "known_profiles", "load_device_profile"]
