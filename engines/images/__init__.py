"""Image generation engines (text to image): request types, the capability, the diffusers backend."""
