"""Flower (src/fedkernels/integrations/flower): apps, protocol, simulation."""
