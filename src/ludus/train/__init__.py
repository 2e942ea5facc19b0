"""ludus.train"""
