"""ludus.verifiers"""
