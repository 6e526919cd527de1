"""The selective scan family (Mamba's S6): checks, the reference, the backends' call forms."""
